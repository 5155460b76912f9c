//go:build integration

package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// draDriver is the driver name of the hand-published ResourceSlice.
const draDriver = "gpu.test.gpuslice.io"

// TestDRAPreemptionConsumableCapacity checks what the stock kube-scheduler
// of this Kubernetes version does when a high-priority pod needs consumable
// capacity (units) of a shared device (allowMultipleAllocations) that
// lower-priority pods' claims hold. One node, one device of 100 units and
// 16 GiB published by hand as a ResourceSlice (what the DRA driver publishes);
// two priority-0 pods each allocated 50 units through their own claim; a
// priority-1000 pod asking for 50 units. In Kubernetes 1.37 the DRA scheduler
// plugin has no PreFilterExtensions (AddPod/RemovePod), so preemption's dry
// run never sees a victim's claim freed: the pod stays Pending and nobody is
// evicted (docs/dra.md, "Preemption"; tracked upstream by KEP-5690,
// kubernetes/enhancements#5690). When this test fails because the pod got
// bound, upstream preemption reached the DRA path: update docs/dra.md.
func TestDRAPreemptionConsumableCapacity(t *testing.T) {
	e, ns := setup(t)
	ctx := context.Background()
	node := ns + "-n-0"
	// Extended: a plain node (no GPUNode row); the devices come from the slice.
	if err := e.cp.CreateNode(ctx, harness.NodeSpec{Name: node, Extended: true, Labels: map[string]string{groupLabel: ns}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	rc := e.cp.Client.ResourceV1()
	class := ns + "-gpu"
	dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "` + draDriver + `"`}}}}}
	if _, err := rc.DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.DeviceClasses().Delete(context.Background(), class, metav1.DeleteOptions{}) })
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: draDriver, NodeName: ptr.To(node),
		Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		Devices: []resourcev1.Device{{Name: "gpu-0", AllowMultipleAllocations: ptr.To(true),
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"units":  {Value: resource.MustParse("100")},
				"memory": {Value: resource.MustParse("16Gi")},
			}}}}}
	if _, err := rc.ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.ResourceSlices().Delete(context.Background(), slice.Name, metav1.DeleteOptions{}) })
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
	high := e.priorityClass(t, ns, 1000)
	for _, name := range []string{"lo-0", "lo-1"} {
		e.draPod(t, ns, name, sched, class)
	}
	e.waitBound(t, ns, "lo-0", "lo-1")
	e.draPod(t, ns, "hi", sched, class, high)
	msg := e.waitReason(t, ns, "hi", "preemption")
	t.Logf("high-priority pod pending: %s", msg)
	e.stayPending(t, ns, "hi", 3*time.Second)
	if got := e.present(t, ns); !slices.Equal(got, []string{"hi", "lo-0", "lo-1"}) {
		t.Fatalf("pods %v: the stock scheduler preempted for a DRA claim (upstream DRA preemption arrived: update docs/dra.md)", got)
	}
}

// draPod creates a ResourceClaim asking for 50 units and 4 GiB of the class
// and a pod using it.
func (e *env) draPod(t *testing.T, ns, name, sched, class string, mut ...func(*corev1.Pod)) {
	t.Helper()
	ctx := context.Background()
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: resourcev1.ResourceClaimSpec{
		Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{
			DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
			Capacity: &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{
				"units": resource.MustParse("50"), "memory": resource.MustParse("4Gi")}},
		}}}}}}
	if _, err := e.cp.Client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := harness.Pod(ns, name, sched, harness.GPURequest{})
	pod.Spec.NodeSelector = map[string]string{groupLabel: ns}
	for _, m := range mut {
		m(pod)
	}
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	if _, err := e.cp.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
