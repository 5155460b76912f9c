package sched

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// draFlights retries the pods with ResourceClaims that were rejected while
// a binding of another such pod was in flight, once that binding ends.
//
// Between a claim's status write and the end of DynamicResources' PreBind
// (which for a device with binding conditions waits until the driver marks
// it ready), the stock claim tracker holds the claim twice: allocated in
// its cache and as an in-flight allocation. GatherAllocatedState sums the
// consumed capacity of both, so a share of a gpuslice.io device is refused
// ("cannot allocate all claims") though the device has room; a binding that
// fails before its write leaves the same stale refusal behind. Neither the
// end of the in-flight allocation nor a failed binding's cleanup is an event
// that DynamicResources' queueing hints see, so without this the pod waits
// for the scheduler's periodic flush (5 minutes). A pod refused while no
// binding was in flight and none ended during its cycle is left to the
// hints (claims deallocated, slices changed).
type draFlights struct {
	mu     sync.Mutex
	flying map[types.UID]struct{} // pods from Reserve to the end of their binding
	wait   *waiters
	// pending reports whether the claim still has an in-flight allocation
	// (the claim tracker's GetPendingAllocation).
	pending func(claim types.UID) bool
	// settle bounds how long a failed binding's claims are watched for
	// their in-flight allocation to go.
	settle time.Duration
}

func newDRAFlights(wait *waiters, pending func(types.UID) bool) *draFlights {
	return &draFlights{flying: map[types.UID]struct{}{}, wait: wait, pending: pending, settle: 10 * time.Second}
}

// generation is read when a pod's cycle starts (PreFilter).
func (f *draFlights) generation() uint64 {
	if f == nil {
		return 0
	}
	return f.wait.generation()
}

// begin records pod's binding, with claims to allocate, as in flight (Reserve).
func (f *draFlights) begin(pod types.UID) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flying[pod] = struct{}{}
}

// end records that pod's binding is over and its claims' in-flight
// allocations gone (PostBind: DynamicResources' PreBind dropped them), and
// retries the pods refused meanwhile.
func (f *draFlights) end(ctx context.Context, pod types.UID) {
	if f == nil {
		return
	}
	// Under mu, so that refused sees the binding in flight or the
	// generation moved on, never neither.
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.flying[pod]; ok {
		delete(f.flying, pod)
		f.wait.wake(ctx)
	}
}

// failed ends pod's binding after it failed (Unreserve). GPUSlice's
// Unreserve runs before DynamicResources' drops the in-flight allocations,
// so the end waits until the claims have none (at most settle).
func (f *draFlights) failed(ctx context.Context, pod types.UID, claims []types.UID) {
	if f == nil {
		return
	}
	f.mu.Lock()
	_, ok := f.flying[pod]
	f.mu.Unlock()
	if !ok {
		return
	}
	go func() {
		deadline := time.Now().Add(f.settle)
		for _, c := range claims {
			for f.pending(c) && time.Now().Before(deadline) {
				select {
				case <-ctx.Done(): // the scheduler stops: the binding ends with it
					deadline = time.Now()
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
		f.end(ctx, pod)
	}()
}

// refused is called when pod, whose cycle started at generation gen, fits
// nowhere: if a binding ended during the cycle it is retried now; if one
// is still in flight it is parked until one ends. (No binding starts during
// a scheduling cycle: Reserve is part of one.)
func (f *draFlights) refused(ctx context.Context, pod *corev1.Pod, gen uint64) {
	if f == nil {
		return
	}
	f.mu.Lock()
	n := len(f.flying)
	f.mu.Unlock()
	if n == 0 && f.wait.generation() == gen {
		return
	}
	f.wait.park(ctx, pod, gen)
}

// preFilterDRA starts the cycle of a pod that asks for no gpuslice
// resources but has ResourceClaims: kept for the capacity nominated pods
// hold (Filter), for preemption (PostFilter) and for the retry after a
// binding in flight (draFlights); the DynamicResources plugin allocates.
func (p *Plugin) preFilterDRA(state fwk.CycleState, pod *corev1.Pod, req *api.PodRequest, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	claims, missing := p.preempt.dra.pendingClaims(pod)
	c := &cycle{req: req, dra: true, draNeed: needOf(claims), flightGen: p.preempt.flights.generation(),
		draFilter: &draFilterView{}}
	for _, cl := range claims {
		c.draClaims = append(c.draClaims, cl.UID)
	}
	state.Write(stateKey, c)
	return p.narrowDRA(state, c, pod, claims, missing, nodes)
}

// reserveDRA: the pod's binding is in flight if it allocates claims; its
// marks as a waiting pod go.
func (p *Plugin) reserveDRA(c *cycle, pod *corev1.Pod) {
	p.wait.forget(pod)
	p.preempt.rec.forget(pod.UID)
	p.preempt.backfill.forget(pod.UID)
	if len(c.draClaims) > 0 {
		p.preempt.flights.begin(pod.UID)
	}
}
