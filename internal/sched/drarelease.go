package sched

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// claimReleaser deallocates the ResourceClaims of the pods preemption
// evicted once they are gone, as the resource claim controller does for
// any pod (the pod is dropped from the claim's reservedFor; a claim left
// with no consumer loses its allocation), without waiting for it: the
// preemptor's claims can be allocated at its next attempt, which starts
// right then (the preemptor is activated: it would otherwise sit out the
// backoff its victim's deletion put it in). A claim still reserved for a
// pod that is not gone keeps its allocation. It acts only on victims
// (expect); anything else is the claim controller's.
type claimReleaser struct {
	client kubernetes.Interface
	// activator moves a preemptor to the active queue (nil: none, tests).
	activator fwk.PodActivator
	mu        sync.Mutex
	// victims: pods evicted by a preemption, when, and for whom.
	victims map[types.UID]victim
	ttl     time.Duration
	// cached reads a claim from the scheduler's claim tracker (nil: none):
	// a release starts from it instead of asking the API server (a round
	// trip between the victim's deletion and its preemptor's activation);
	// a stale copy costs a conflict, then the claim is read from the API.
	cached func(namespace, name string) (*resourceapi.ResourceClaim, error)
	// assume puts a claim just written into that tracker (nil: none), as
	// DynamicResources does after its own writes: the preemptor, activated
	// right after, must find its victim's claim deallocated there, not wait
	// for the informer (its try then found the share still taken and sat
	// out a backoff: seconds, the tail of a burst's p99). Only the victim's
	// own claims (controlled by it: the resource claim controller's from its
	// template, the scheduler's for its extended resources): a named claim
	// may be shared, and another pod's cycle that assumed it and restores it
	// in Unreserve (AssumedClaimRestore) could leave the tracker stale; its
	// release is left to the informer.
	assume func(*resourceapi.ResourceClaim) error
	// freed: per victim, what the claims this releaser deallocated for it
	// were allocated, and when: until the tracker's allocated state (fed
	// after its claims by the same informer event, emitEvents) no longer
	// has it, the victim still holds it (lags).
	freed map[types.UID]freedDevices
}

// freedDevices is what a victim's released claims were allocated.
type freedDevices struct {
	at      time.Time
	results []resourceapi.DeviceRequestAllocationResult
}

type victim struct {
	at time.Time
	by *corev1.Pod // the preemptor
}

func newClaimReleaser(c kubernetes.Interface, a fwk.PodActivator, ttl time.Duration) *claimReleaser {
	return &claimReleaser{client: c, activator: a, victims: map[types.UID]victim{}, ttl: ttl, freed: map[types.UID]freedDevices{}}
}

// expect records pods being evicted by a preemption for by.
func (r *claimReleaser) expect(by *corev1.Pod, uids []string) {
	if r == nil || len(uids) == 0 {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, v := range r.victims {
		if now.Sub(v.at) > r.ttl {
			delete(r.victims, uid)
		}
	}
	for uid, f := range r.freed {
		if now.Sub(f.at) > r.ttl {
			delete(r.freed, uid)
		}
	}
	for _, u := range uids {
		r.victims[types.UID(u)] = victim{at: now, by: by}
	}
}

// take reports whether uid is an expected victim, and forgets it; by is
// its preemptor.
func (r *claimReleaser) take(uid types.UID) (by *corev1.Pod, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.victims[uid]
	delete(r.victims, uid)
	return v.by, ok
}

// gone is called when a pod is deleted: a victim's claims are released,
// then its preemptor is activated.
func (r *claimReleaser) gone(ctx context.Context, pod *corev1.Pod) {
	if r == nil || !hasClaims(pod) {
		return
	}
	by, ok := r.take(pod.UID)
	if !ok {
		return
	}
	go func() {
		for _, name := range claimNames(pod) {
			if err := r.release(ctx, pod, name); err != nil {
				klog.FromContext(ctx).Error(err, "releasing a preempted pod's ResourceClaim (the resource claim controller will)",
					"pod", klog.KObj(pod), "resourceclaim", klog.KRef(pod.Namespace, name))
			}
		}
		if by != nil && r.activator != nil {
			r.activator.Activate(klog.FromContext(ctx), map[string]*corev1.Pod{by.Namespace + "/" + by.Name: by})
		}
	}()
}

// release drops pod from the claim's consumers and deallocates the claim if
// none is left; conflicts are retried on a fresh read.
func (r *claimReleaser) release(ctx context.Context, pod *corev1.Pod, name string) error {
	rc := r.client.ResourceV1().ResourceClaims(pod.Namespace)
	fromCache := r.cached != nil
	reserved := func(c *resourceapi.ResourceClaim) int {
		return slices.IndexFunc(c.Status.ReservedFor, func(ref resourceapi.ResourceClaimConsumerReference) bool { return ref.UID == pod.UID })
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var c *resourceapi.ResourceClaim
		if fromCache { // first try only; a copy that does not name the pod is asked again
			fromCache = false
			if cc, err := r.cached(pod.Namespace, name); err == nil && reserved(cc) >= 0 {
				c = cc
			}
		}
		if c == nil {
			var err error
			if c, err = rc.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return nil
			} else if err != nil {
				return err
			}
		}
		i := reserved(c)
		if i < 0 {
			return nil
		}
		c = c.DeepCopy()
		c.Status.ReservedFor = slices.Delete(c.Status.ReservedFor, i, i+1)
		if len(c.Status.ReservedFor) == 0 {
			r.deallocating(pod.UID, c.Status.Allocation)
			c.Status.ReservedFor = nil
			c.Status.Allocation = nil
			c.Status.Devices = nil
		}
		written, err := rc.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		logger := klog.FromContext(ctx)
		if r.assume != nil && metav1.IsControlledBy(written, pod) {
			if err := r.assume(written); err != nil { // (the informer's copy comes anyway)
				logger.V(4).Info("claim tracker not updated after a release", "resourceclaim", klog.KObj(c), "err", err)
			}
		}
		logger.V(2).Info("released a preempted pod's ResourceClaim", "pod", klog.KObj(pod),
			"resourceclaim", klog.KObj(c), "deallocated", c.Status.Allocation == nil)
		return nil
	})
}

// holds reports whether the victim uid still holds what it was evicted
// for: GPUs in the books, or (DRA) a claim still allocated and reserved
// for it, which its preemptor must not preempt again for (the victim's
// pod is gone before its claims are deallocated, and a preemptor retried in
// between would find no room and evict more).
func (pr *preemptor) holds(uid, node string) bool {
	if pr.alloc.Holds(uid, node) {
		return true
	}
	if pr.dra == nil {
		return false
	}
	claims, err := pr.dra.dra.ResourceClaims().List()
	if err != nil {
		return true // unknown: wait (bounded by the preemptor's victimWait)
	}
	for _, c := range claims {
		if c.Status.Allocation != nil && slices.ContainsFunc(c.Status.ReservedFor,
			func(r resourceapi.ResourceClaimConsumerReference) bool { return string(r.UID) == uid }) {
			return true
		}
	}
	tr := pr.dra.dra.ResourceClaims()
	return pr.release.lags(types.UID(uid), claims, tr.GetPendingAllocation, pr.dra.allocatedState)
}

// deallocating records that the claim of victim uid allocated a is being
// deallocated (before the write: the tracker cannot see it released
// first).
func (r *claimReleaser) deallocating(uid types.UID, a *resourceapi.AllocationResult) {
	if a == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.freed[uid]
	f.at = time.Now()
	f.results = append(f.results, a.Devices.Results...)
	r.freed[uid] = f
}

// lags reports whether the tracker's allocated state (state) still has
// what the claims released for victim uid were allocated, held by none of
// claims (the tracker's, with their pending allocations). The informer's
// event reaches the tracker's claims first and its allocated state after
// (the assume cache's emitEvents); a preemptor retried in between found
// the victim's claim released, and its dry run found the victim's device
// taken by nobody (unattributed) and evicted a pod beside it for the room
// the release had made. Once the state has caught up the record goes. A
// state that cannot be read: held (the wait is bounded by victimWait).
func (r *claimReleaser) lags(uid types.UID, claims []*resourceapi.ResourceClaim, pending func(types.UID) *resourceapi.AllocationResult,
	state func() (*structured.AllocatedState, error)) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	f, ok := r.freed[uid]
	r.mu.Unlock()
	if !ok {
		return false
	}
	st, err := state()
	if err != nil {
		return true
	}
	if stillAllocated(f.results, claims, pending, st) {
		return true
	}
	r.mu.Lock()
	delete(r.freed, uid)
	r.mu.Unlock()
	return false
}

// stillAllocated tells whether st has one of results: its share, or its
// device allocated whole and held by none of claims, allocated or pending
// (in flight: in st, not yet in the claim).
func stillAllocated(results []resourceapi.DeviceRequestAllocationResult, claims []*resourceapi.ResourceClaim,
	pending func(types.UID) *resourceapi.AllocationResult, st *structured.AllocatedState) bool {
	for _, r := range results {
		if r.AdminAccess != nil && *r.AdminAccess {
			continue // (not in the allocated state)
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID != nil {
			if st.AllocatedSharedDeviceIDs.Has(structured.MakeSharedDeviceID(id, r.ShareID)) {
				return true
			}
			continue
		}
		if st.AllocatedDevices.Has(id) && !slices.ContainsFunc(claims, func(c *resourceapi.ResourceClaim) bool {
			return allocates(c.Status.Allocation, id) || (c.Status.Allocation == nil && allocates(pending(c.UID), id))
		}) {
			return true
		}
	}
	return false
}

// allocates tells whether a allocates device id.
func allocates(a *resourceapi.AllocationResult, id structured.DeviceID) bool {
	return a != nil && slices.ContainsFunc(a.Devices.Results,
		func(r resourceapi.DeviceRequestAllocationResult) bool {
			return structured.MakeDeviceID(r.Driver, r.Pool, r.Device) == id
		})
}
