//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// attached is the binding condition of the test's device: the scheduler
// holds a pod's binding (DynamicResources' PreBind) until the claim's
// device status says it, as a driver that attaches devices would.
// attachFailed its failure condition (never set here).
const (
	attached     = "test.gpuslice.io/attached"
	attachFailed = "test.gpuslice.io/attach-failed"
)

// TestDRARetriedAfterBinding: a pod rejected by DynamicResources while
// another pod's claim is being bound is retried once that binding ends.
// While a binding is in flight (from its claim's status write to the end of
// PreBind) the stock claim tracker counts the claim's consumed capacity
// twice, once as allocated and once as in flight, so a share is rejected
// ("cannot allocate all claims"; gpuslice-scheduler's PreFilter, reading
// the same state, refuses it first) with room on the device; the binding's end
// is no event to DynamicResources' queueing hints, and without a retry the
// pod waits for the scheduler's 5-minute flush. The window is short on
// every binding (the preemptors of TestDRANominatedCapacityHeld fell into
// it with the preemption shortlist); here the device's binding condition
// holds it open: "a" (50 units) waits in PreBind until the test marks its
// device attached; "b" (50 units) is tried meanwhile and rejected; once "a"
// binds, "b" must be allocated and bound within 30 s. Fails on main's
// scheduler (b stays Pending).
func TestDRARetriedAfterBinding(t *testing.T) {
	e, ns := setup(t)
	ctx := context.Background()
	if err := e.cp.CreateDeviceClasses(ctx, false); err != nil {
		t.Fatal(err)
	}
	node := ns + "-n-0"
	if err := e.cp.CreateNode(ctx, harness.NodeSpec{Name: node, Extended: true, Labels: map[string]string{groupLabel: ns}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	s, err := harness.DRASlice(node, 1, 16*harness.GiB)
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Devices[0].BindingConditions = []string{attached}
	s.Spec.Devices[0].BindingFailureConditions = []string{attachFailed}
	e.createSlice(t, s)
	sched := ns + "-sched"
	e.startScheduler(t, sched, staticRows)
	half := harness.GPURequest{Units: 50, Memory: harness.GiB}

	e.claimPod(t, ns, "a", sched, half)
	a := e.waitAllocated(t, ns, "a")
	e.claimPod(t, ns, "b", sched, half)
	msg := e.waitRejected(t, ns, "b")
	t.Logf("b rejected while a's binding waits: %q", msg)
	e.markAttached(t, a)
	e.waitBound(t, ns, "a")
	start := time.Now()
	e.markAttached(t, e.waitAllocated(t, ns, "b"))
	e.waitBound(t, ns, "b")
	t.Logf("b allocated and bound %v after a's device was attached", time.Since(start).Round(time.Millisecond))
	if got, want := strings.Join(e.draCheck(t, ns), ","), "a,b"; got != want {
		t.Fatalf("allocated claims %s, want %s", got, want)
	}
}

// waitAllocated waits until the claim named name is allocated and returns
// it; after 30 s it fails with the pod's scheduling message.
func (e *env) waitAllocated(t *testing.T, ns, name string) *resourceapi.ResourceClaim {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var c *resourceapi.ResourceClaim
	err := harness.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		got, err := e.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c = got
		return got.Status.Allocation != nil, nil
	})
	if err != nil {
		p, _ := e.cp.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		why := ""
		if p != nil {
			why = scheduledMessage(p)
		}
		t.Fatalf("claim %s not allocated: %v; pod %s: %q", name, err, name, why)
	}
	return c
}

// waitRejected waits until the pod is reported unschedulable for lack of
// room (by DynamicResources, or by GPUSlice's PreFilter from the same
// allocated state) and returns the message.
func (e *env) waitRejected(t *testing.T, ns, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var msg string
	err := harness.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		p, err := e.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Spec.NodeName != "" {
			return false, nil
		}
		msg = scheduledMessage(p)
		return strings.Contains(msg, "cannot allocate all claims") || strings.Contains(msg, "has the claim's share free"), nil
	})
	if err != nil {
		t.Fatalf("pod %s not refused for lack of room: %v (last message %q)", name, err, msg)
	}
	return msg
}

// markAttached sets the binding condition on each device of the claim's
// allocation, as the driver would once the device is attached.
func (e *env) markAttached(t *testing.T, c *resourceapi.ResourceClaim) {
	t.Helper()
	rc := e.cp.Client.ResourceV1().ResourceClaims(c.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := rc.Get(context.Background(), c.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Status.Devices = nil
		for _, r := range c.Status.Allocation.Devices.Results {
			var share *string
			if r.ShareID != nil {
				share = ptr.To(string(*r.ShareID))
			}
			c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: r.Driver, Pool: r.Pool, Device: r.Device,
				ShareID: share, Conditions: []metav1.Condition{{Type: attached, Status: metav1.ConditionTrue,
					Reason: "Attached", LastTransitionTime: metav1.Now(), ObservedGeneration: c.Generation}}})
		}
		_, err = rc.UpdateStatus(context.Background(), c, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("marking claim %s's devices attached: %v", c.Name, err)
	}
}
