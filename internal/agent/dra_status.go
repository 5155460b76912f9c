package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/dra"
	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/dra/taints"
	drav1 "github.com/gpuslice/gpuslice/pkg/apis/dra/v1alpha1"
)

// statusFieldManager owns the driver's entries in claims' status.devices.
const statusFieldManager = "gpuslice-node"

// claimRef names a claim whose device status is to be written.
type claimRef struct {
	Namespace, Name string
	UID             types.UID
}

// claimStatus writes each prepared claim's device status (ResourceClaim
// status.devices, allocatedDeviceStatus): per device its GPU's UUID and
// health, admin access, the claim's group, and a Ready condition, by
// server-side apply (field manager gpuslice-node: other drivers' entries of
// the claim are theirs). Written after Prepare answers (not on its path), again
// when a device's health changes, and emptied after Unprepare. One worker;
// a failed write is retried with backoff, at most 5 times.
type claimStatus struct {
	cs    kubernetes.Interface
	d     *dra.Driver
	queue workqueue.TypedRateLimitingInterface[claimRef]
	mu    sync.Mutex
	// unhealthy are the devices carrying a gpuslice.io/unhealthy taint.
	unhealthy map[string]bool
}

func newClaimStatus(cs kubernetes.Interface, d *dra.Driver) *claimStatus {
	return &claimStatus{cs: cs, d: d, unhealthy: map[string]bool{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[claimRef]())}
}

// run writes statuses until ctx ends.
func (s *claimStatus) run(ctx context.Context) {
	go func() { <-ctx.Done(); s.queue.ShutDown() }()
	for s.next(ctx) {
	}
}

func (s *claimStatus) next(ctx context.Context) bool {
	ref, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(ref)
	err := s.write(ctx, ref)
	switch {
	case err == nil || apierrors.IsNotFound(err):
		s.queue.Forget(ref)
	case s.queue.NumRequeues(ref) < 5:
		s.queue.AddRateLimited(ref)
	default:
		klog.FromContext(ctx).Error(err, "DRA claim device status not written", "claim", ref.Namespace+"/"+ref.Name)
		s.queue.Forget(ref)
	}
	return true
}

// setTaints records the devices' taints (by device name); the prepared
// claims holding a device whose health changed are written again.
func (s *claimStatus) setTaints(names []string, ts [][]resourceapi.DeviceTaint) {
	s.mu.Lock()
	var changed []string
	for i, n := range names {
		bad := slices.ContainsFunc(ts[i], func(t resourceapi.DeviceTaint) bool { return t.Key == taints.KeyUnhealthy })
		if bad != s.unhealthy[n] {
			changed = append(changed, n)
		}
		s.unhealthy[n] = bad
	}
	s.mu.Unlock()
	for uid, c := range s.d.Prepared() {
		if slices.ContainsFunc(c.Devices, func(d checkpoint.Device) bool { return slices.Contains(changed, d.Device) }) {
			s.queue.Add(claimRef{Namespace: c.Namespace, Name: c.Name, UID: types.UID(uid)})
		}
	}
}

// write applies the claim's device status: its devices if prepared here,
// none (ours removed) otherwise.
func (s *claimStatus) write(ctx context.Context, ref claimRef) error {
	st := resourceapply.ResourceClaimStatus().WithDevices() // empty: our entries go
	if c, ok := s.d.Prepared()[string(ref.UID)]; ok && c.State == checkpoint.PrepareCompleted {
		for _, dev := range c.Devices {
			e, err := s.entry(c, dev)
			if err != nil {
				return err
			}
			st.WithDevices(e)
		}
	}
	ac := resourceapply.ResourceClaim(ref.Name, ref.Namespace).WithUID(ref.UID).WithStatus(st)
	_, err := s.cs.ResourceV1().ResourceClaims(ref.Namespace).ApplyStatus(ctx, ac,
		metav1.ApplyOptions{FieldManager: statusFieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("claim %s/%s device status: %w", ref.Namespace, ref.Name, err)
	}
	return nil
}

// entry is one device's status.
func (s *claimStatus) entry(c checkpoint.Claim, dev checkpoint.Device) (*resourceapply.AllocatedDeviceStatusApplyConfiguration, error) {
	s.mu.Lock()
	health := drav1.HealthHealthy
	if s.unhealthy[dev.Device] {
		health = drav1.HealthUnhealthy
	}
	s.mu.Unlock()
	data := drav1.DeviceStatus{UUID: dev.UUID, Health: health, AdminAccess: dev.AdminAccess, Group: c.Group}
	data.APIVersion, data.Kind = drav1.SchemeGroupVersion.String(), drav1.DeviceStatusKind
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	msg := "prepared in group " + c.Group
	if dev.AdminAccess {
		msg = "prepared for admin access: no group, gate or limit"
	}
	e := resourceapply.AllocatedDeviceStatus().WithDriver(dra.DriverName).WithPool(dev.Pool).WithDevice(dev.Device).
		WithData(runtime.RawExtension{Raw: raw}).
		WithConditions(metav1apply.Condition().WithType("Ready").WithStatus(metav1.ConditionTrue).WithReason("Prepared").
			WithMessage(msg).WithLastTransitionTime(metav1.NewTime(time.Now().Truncate(time.Second))))
	if dev.ShareID != "" {
		e.WithShareID(dev.ShareID)
	}
	return e, nil
}

// draPlugin is the driver as the kubelet plugin sees it: each claim it
// prepared or unprepared has its device status written afterwards.
type draPlugin struct {
	*dra.Driver
	status *claimStatus
	pods   listersv1.PodLister
}

// PrepareResourceClaims prepares the claims, but those a container cannot
// hold beside its others (claimsPerContainer).
func (p draPlugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	ours := map[string]ourClaim{}
	for _, c := range p.Prepared() {
		ours[c.Namespace+"/"+c.Name] = ourPreparedClaim(c)
	}
	for _, c := range claims {
		ours[c.Namespace+"/"+c.Name] = ourClaimOf(c, p.IsMIG)
	}
	refused := claimsPerContainer(p.pods, claims, ours)
	var rest []*resourceapi.ResourceClaim
	for _, c := range claims {
		if refused[c.UID] == nil {
			rest = append(rest, c)
		}
	}
	out, err := p.Driver.PrepareResourceClaims(ctx, rest)
	if out == nil {
		out = map[types.UID]kubeletplugin.PrepareResult{}
	}
	for uid, e := range refused {
		klog.FromContext(ctx).Error(e, "DRA claim not prepared", "uid", uid)
		out[uid] = kubeletplugin.PrepareResult{Err: e}
	}
	for _, c := range claims {
		if r, ok := out[c.UID]; ok && r.Err == nil {
			p.status.queue.Add(claimRef{Namespace: c.Namespace, Name: c.Name, UID: c.UID})
		}
	}
	return out, err
}

func (p draPlugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out, err := p.Driver.UnprepareResourceClaims(ctx, claims)
	for _, c := range claims {
		if e, ok := out[c.UID]; ok && e == nil {
			p.status.queue.Add(claimRef{Namespace: c.Namespace, Name: c.Name, UID: c.UID})
		}
	}
	return out, err
}
