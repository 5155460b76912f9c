//go:build integration

package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// TestDRAPreemptExtendedResourceMapped: the whole-GPU class maps
// gpuslice.io/gpu (the chart's default) and the node offers GPUs only
// through DRA (its ResourceSlice; gpuslice.io/gpu 0 in its allocatable).
// Two GPUs are held whole: one by a priority-500 pod with its own claim,
// one by a priority-0 plain pod asking for gpuslice.io/gpu: 1 (its claim
// made by the scheduler from the mapping). A priority-1000 plain pod asking
// for gpuslice.io/gpu: 1 (no claim of it exists before it is bound: the
// scheduler makes it in PreBind) preempts the priority-0 pod as a pod with a
// template's claim would, the victim's claim is deallocated by
// gpuslice-scheduler, and the preemptor is bound with its own mapped claim
// on that GPU; nothing over-committed.
func TestDRAPreemptExtendedResourceMapped(t *testing.T) {
	e, ns := setup(t)
	e.draNodes(t, ns, 1, 2)
	e.mapWholeGPUs(t)
	sched := ns + "-sched"
	e.startScheduler(t, sched, staticRows)
	high, mid := e.priorityClass(t, ns, 1000), e.priorityClass(t, ns, 500)
	e.fillClaims(t, ns, sched, []filler{{name: "w-mid", req: harness.GPURequest{GPUs: 1}, mut: []func(*corev1.Pod){mid}}})
	e.createPod(t, ns, "w-low", sched, harness.GPURequest{GPUs: 1})
	low := consumed(t, e.extendedClaim(t, ns, "w-low"))
	before := e.present(t, ns)
	start := time.Now()
	e.createPod(t, ns, "hi", sched, harness.GPURequest{GPUs: 1}, high)
	claim := e.extendedClaim(t, ns, "hi")
	t.Logf("hi bound %v after creation, claim %s", time.Since(start).Round(time.Millisecond), claim.Name)
	e.checkLeft(t, ns, before, []string{"w-low"})
	got := consumed(t, claim)
	if len(got) != 1 || len(low) != 1 || got[0].device != low[0].device || got[0].units != 100 {
		t.Fatalf("hi's mapped claim got %+v, want the whole GPU the evicted w-low held (%+v)", got, low)
	}
	if alloc, want := e.draCheck(t, ns), []string{claim.Name, "w-mid"}; !slices.Equal(alloc, want) {
		t.Fatalf("allocated claims %v, want %v (the victim's mapped claim deallocated)", alloc, want)
	}
}

// mapWholeGPUs gives the whole-GPU class extendedResourceName
// gpuslice.io/gpu for this test (before the scheduler starts: its class
// resolver then has it from the start); later tests' classes have none.
func (e *env) mapWholeGPUs(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := e.cp.CreateDeviceClasses(ctx, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.cp.CreateDeviceClasses(context.Background(), false); err != nil {
			t.Errorf("unmapping gpu.gpuslice.io: %v", err)
		}
	})
}
