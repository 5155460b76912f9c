//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// TestDRAPreemptBusyGPU: one node, one GPU holding priority-0 shares of
// 20, 50 and 20 units; then its GPUNode row measures the GPU at 99 %
// (utilizationThreshold 90: the victims' work, the row not yet refreshed).
// A priority-1000 claim of 50 units evicts the 50-unit pod alone and is
// bound on that GPU: on the node it is nominated to the device view shows
// the busy GPU its victims freed (as the plugin path's freed GPUs). Before
// the fix the view kept hiding it from the preemptor, which stayed Pending
// after its victim was gone (and preempted again, nominated with no victims).
func TestDRAPreemptBusyGPU(t *testing.T) {
	e, ns := setup(t)
	ctx := context.Background()
	if err := e.cp.CreateDeviceClasses(ctx, false); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	s := harness.NodeSpec{Name: ns + "-n-0", GPUs: 1, GPUMemory: 16 * harness.GiB, Labels: map[string]string{groupLabel: ns}}
	if err := e.cp.CreateNode(ctx, s, now); err != nil { // with its GPUNode row (0 %) and Lease
		t.Fatal(err)
	}
	sl, err := harness.DRASlice(s.Name, 1, 16*harness.GiB)
	if err != nil {
		t.Fatal(err)
	}
	e.createSlice(t, sl)
	sched := ns + "-sched"
	e.startScheduler(t, sched, "{utilizationThreshold: 90, heartbeatTimeout: 1h}")
	high := e.priorityClass(t, ns, 1000)
	g := harness.GiB
	e.fillClaims(t, ns, sched, []filler{{name: "a", req: harness.GPURequest{Units: 20, Memory: g}},
		{name: "big", req: harness.GPURequest{Units: 50, Memory: g}}, {name: "b", req: harness.GPURequest{Units: 20, Memory: g}}})

	row := s.GPUNode(now)
	row.Status.GPUs[0].UtilizationPercent = 99
	row.Status.Summary = v1alpha2.Summarize(row.Status.GPUs)
	if err := harness.PutGPUNode(ctx, e.cp.GPUNodes, row); err != nil {
		t.Fatal(err)
	}
	// The scheduler has the row once a priority-0 claim of the 10 free
	// units is refused (it would fit but for the GPU's utilization).
	e.claimPod(t, ns, "probe", sched, harness.GPURequest{Units: 10, Memory: g})
	e.waitUnschedulable(t, ns, "probe")
	e.deletePod(t, ns, "probe")
	e.waitGone(t, ns, "probe")

	e.preemptClaimAndCheck(t, ns, sched, high, harness.GPURequest{Units: 50, Memory: g}, []string{"big"})
	if got, want := e.claimDevices(t, ns, "hi")["hi"], s.Name+"/gpu-0"; got != want {
		t.Errorf("hi's claim on %s, want %s", got, want)
	}
}

// waitUnschedulable waits until the scheduler marks the pod Unschedulable.
func (e *env) waitUnschedulable(t *testing.T, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("pod %s bound to %s, want it refused", name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s not marked Unschedulable: %v", name, err)
	}
}
