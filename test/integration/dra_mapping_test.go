//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// TestDRAExtendedResourceMapping: what a DeviceClass extendedResourceName
// (KEP-5004, GA in 1.37) expresses, on the stock kube-scheduler and a node
// publishing the DRA driver's ResourceSlice (2 shareable GPUs, no gpuslice
// extended resources in its allocatable), as docs/dra.md states it:
//   - the mapping asks for a count of whole devices: a class mapped to
//     gpuslice.io/gpu-units turns "gpuslice.io/gpu-units: 2" into two whole
//     GPUs, each consumed at its request policy's default (all of it), not
//     2 units: fractions cannot be expressed through it;
//   - a plain pod asking for gpuslice.io/gpu: 1 gets one whole GPU through
//     the scheduler's own claim (pod status names it), consumed in full;
//   - a share claim (25 units) lands on the other GPU, and a second plain
//     whole-GPU pod then stays Pending with the scheduler's reason.
func TestDRAExtendedResourceMapping(t *testing.T) {
	e, ns := setup(t)
	ctx := context.Background()
	const gpuMemory = 16 * harness.GiB
	sched := e.mappingNode(t, ns, gpuMemory)

	// "2 units" through the mapping: two whole GPUs.
	e.createPod(t, ns, "units-2", sched, harness.GPURequest{Units: 2})
	claim := e.extendedClaim(t, ns, "units-2")
	got := consumed(t, claim)
	if len(got) != 2 || got[0].units != api.DefaultUnitsPerGPU || got[1].units != api.DefaultUnitsPerGPU {
		t.Fatalf("gpuslice.io/gpu-units: 2 through the mapping got %+v, want two whole GPUs (%d units each)", got, api.DefaultUnitsPerGPU)
	}
	t.Logf("mapping: gpuslice.io/gpu-units: 2 -> claim %s: %+v (two whole GPUs)", claim.Name, got)
	e.deletePod(t, ns, "units-2")
	e.removeClaim(t, ns, claim.Name)

	// A plain pod asking for gpuslice.io/gpu: one whole GPU.
	e.createPod(t, ns, "whole", sched, harness.GPURequest{GPUs: 1})
	claim = e.extendedClaim(t, ns, "whole")
	whole := consumed(t, claim)
	if len(whole) != 1 || whole[0].units != api.DefaultUnitsPerGPU || whole[0].memory != gpuMemory {
		t.Fatalf("gpuslice.io/gpu: 1 got %+v, want one whole GPU (%d units, %d bytes)", whole, api.DefaultUnitsPerGPU, gpuMemory)
	}
	// A share of 25 units: the other GPU.
	share := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "share-25"},
		Spec: harness.DRAClaimSpec(harness.GPURequest{Units: 25, Memory: 4 * harness.GiB})}
	if _, err := e.cp.Client.ResourceV1().ResourceClaims(ns).Create(ctx, share, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := harness.DRAPod(ns, "share-25", sched, share.Name, false)
	pod.Spec.NodeSelector = map[string]string{groupLabel: ns}
	if _, err := e.cp.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitBound(t, ns, "share-25")
	sc, err := e.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, share.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shared := consumed(t, sc)
	if len(shared) != 1 || shared[0].units != 25 || shared[0].memory != 4*harness.GiB || shared[0].device == whole[0].device {
		t.Fatalf("share claim got %+v, want 25 units and 4 GiB of the GPU the whole-GPU pod does not hold (%s)", shared, whole[0].device)
	}
	// No GPU is whole any more: a second plain pod stays Pending.
	e.createPod(t, ns, "whole-2", sched, harness.GPURequest{GPUs: 1})
	e.stayPending(t, ns, "whole-2", 5*time.Second)
	msg := e.pendingMessage(t, ns, "whole-2")
	t.Logf("mapping: gpuslice.io/gpu: 1 -> %s %+v; share -> %+v; second whole-GPU pod Pending: %q", claim.Name, whole, shared, msg)
}

// mappingNode is TestDRAExtendedResourceMapping's cluster: one node of two
// GPUs of gpuMemory in a ResourceSlice, the chart's DeviceClasses with the
// extended-resource mapping and one mapping gpuslice.io/gpu-units, and a
// stock kube-scheduler of its own (its name returned), all removed after the test.
func (e *env) mappingNode(t *testing.T, ns string, gpuMemory int64) string {
	t.Helper()
	ctx := context.Background()
	nodes := e.nodes(t, ns+"-dra", 1, 2)
	slice, err := harness.DRASlice(nodes[0].Name, 2, gpuMemory)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cp.Client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cp.Client.ResourceV1().ResourceSlices().Delete(ctx, slice.Name, metav1.DeleteOptions{}) })
	// The classes exist for this test only: other tests' nodes advertise no
	// gpuslice.io/gpu, so with the mapping present their pods would be
	// placed through DRA.
	if err := e.cp.CreateDeviceClasses(ctx, true); err != nil {
		t.Fatal(err)
	}
	unitsClass := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "units-mapping.gpuslice.io"}, Spec: resourceapi.DeviceClassSpec{
		Selectors:            []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", harness.DRADriver)}}},
		ExtendedResourceName: ptr.To(string(api.ResourceUnits))}}
	if _, err := e.cp.Client.ResourceV1().DeviceClasses().Create(ctx, unitsClass, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range []string{harness.DRAClassWhole, harness.DRAClassShare, unitsClass.Name} {
			_ = e.cp.Client.ResourceV1().DeviceClasses().Delete(ctx, c, metav1.DeleteOptions{})
		}
	})
	sched := ns + "-stock"
	p, err := e.cp.StartScheduler(ctx, e.bins.Path("kube-scheduler"), sched, harness.SchedulerOptions{SchedulerName: sched})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("kube-scheduler log tail:\n%s", p.Tail())
		}
	})
	return sched
}

// grant is what one allocated device gives a claim.
type grant struct {
	device        string
	units, memory int64
}

// consumed lists the devices of an allocated claim and what it consumes of each.
func consumed(t *testing.T, c *resourceapi.ResourceClaim) []grant {
	t.Helper()
	if c.Status.Allocation == nil {
		t.Fatalf("claim %s is not allocated", c.Name)
	}
	var out []grant
	for _, r := range c.Status.Allocation.Devices.Results {
		u, m := r.ConsumedCapacity[harness.DRAUnits], r.ConsumedCapacity[harness.DRAMemory]
		out = append(out, grant{device: r.Device, units: u.Value(), memory: m.Value()})
	}
	return out
}

// extendedClaim waits until the pod is bound and returns the claim the
// scheduler made for its extended resources (named in the pod's status).
func (e *env) extendedClaim(t *testing.T, ns, pod string) *resourceapi.ResourceClaim {
	t.Helper()
	p := e.waitBound(t, ns, pod)[pod]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var name string
	err := harness.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		got, err := e.cp.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil || got.Status.ExtendedResourceClaimStatus == nil {
			return false, nil
		}
		name = got.Status.ExtendedResourceClaimStatus.ResourceClaimName
		return true, nil
	})
	if err != nil {
		t.Fatalf("pod %s (on %s) has no extended resource claim in its status: %v", pod, p.Spec.NodeName, err)
	}
	c, err := e.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// removeClaim deletes a claim whose pod is gone. No kube-controller-manager
// runs here to take the scheduler's delete-protection finalizer off.
func (e *env) removeClaim(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	claims := e.cp.Client.ResourceV1().ResourceClaims(ns)
	if _, err := claims.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !isNotFound(err) {
		t.Fatal(err)
	}
	if err := claims.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !isNotFound(err) {
		t.Fatal(err)
	}
}

// pendingMessage is the scheduler's reason for an unbound pod.
func (e *env) pendingMessage(t *testing.T, ns, name string) string {
	t.Helper()
	p, err := e.cp.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	msg := scheduledMessage(p)
	if msg == "" {
		t.Fatalf("pod %s is Pending without the scheduler's reason", name)
	}
	return msg
}
