//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// Device-level placement of claims (issue 32): gpuslice-scheduler's
// GPUSliceDynamicResources offers the stock allocator a node's devices in
// the pod's policy order with the GPUs measured above the utilization
// threshold left out, so the first device that fits is the policy's. With
// kube-scheduler's DynamicResources as it is (first fit in slice order),
// each of these fails: the claims all land on gpu-0.

var quarter = harness.GPURequest{Units: 25, Memory: 4 * harness.GiB}

// claimDevices returns, per claim name, the device its allocation names.
func (e *env) claimDevices(t *testing.T, ns string, names ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range names {
		c, err := e.cp.Client.ResourceV1().ResourceClaims(ns).Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 1 {
			t.Fatalf("claim %s: allocation %+v, want one device", n, c.Status.Allocation)
		}
		r := c.Status.Allocation.Devices.Results[0]
		if r.ShareID == nil || r.ConsumedCapacity == nil {
			t.Fatalf("claim %s: %+v is not a share with its consumed capacity", n, r)
		}
		out[n] = r.Pool + "/" + r.Device
	}
	return out
}

// TestDRADeviceBinpack: one node of 8 GPUs, a quarter pinned to gpu-2 (a
// CEL selector on the device's index); three more quarters, binpack: all on
// gpu-2, the fullest device that fits (first fit: gpu-0).
func TestDRADeviceBinpack(t *testing.T) {
	e, ns := setup(t)
	e.draNodes(t, ns, 1, 8)
	sched := ns + "-sched"
	e.startScheduler(t, sched, "{placement: binpack, heartbeatTimeout: 1h}")
	pinned := harness.DRAClaimSpec(quarter)
	pinned.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf("device.attributes[%q].index == 2", harness.DRADriver)}}}
	e.createClaim(t, ns, "q-0", pinned)
	e.podWithClaims(t, ns, "q-0", sched, []string{"q-0"})
	e.waitBound(t, ns, "q-0")
	names := []string{"q-0"}
	for i := 1; i < 4; i++ {
		n := fmt.Sprintf("q-%d", i)
		e.fillClaims(t, ns, sched, []filler{{name: n, req: quarter}})
		names = append(names, n)
	}
	want := ns + "-n-0/gpu-2"
	for n, d := range e.claimDevices(t, ns, names...) {
		if d != want {
			t.Errorf("binpack: claim %s on %s, want all four quarters on %s", n, d, want)
		}
	}
	e.draCheck(t, ns)
}

// TestDRADeviceSpread: one node of 8 GPUs, four quarters one after
// another, spread: four GPUs, the emptiest first (first fit: all on gpu-0).
func TestDRADeviceSpread(t *testing.T) {
	e, ns := setup(t)
	e.draNodes(t, ns, 1, 8)
	sched := ns + "-sched"
	e.startScheduler(t, sched, "{placement: spread, heartbeatTimeout: 1h}")
	var names []string
	for i := range 4 {
		n := fmt.Sprintf("q-%d", i)
		e.fillClaims(t, ns, sched, []filler{{name: n, req: quarter}})
		names = append(names, n)
	}
	devs := map[string]bool{}
	for _, d := range e.claimDevices(t, ns, names...) {
		devs[d] = true
	}
	if len(devs) != 4 {
		t.Errorf("spread: four quarters on %d GPUs %v, want 4", len(devs), devs)
	}
	e.draCheck(t, ns)
}

// TestDRADeviceUtilizationThreshold: node a has one GPU, measured at 99 %
// (its GPUNode row); node b two, gpu-0 measured at 99 %, gpu-1 at 10 %;
// utilizationThreshold 90. A quarter goes to b's gpu-1: a's only GPU and
// b's gpu-0 are skipped (first fit: gpu-0 of a or b).
func TestDRADeviceUtilizationThreshold(t *testing.T) {
	e, ns := setup(t)
	ctx := context.Background()
	if err := e.cp.CreateDeviceClasses(ctx, false); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, util := range [][]int32{{99}, {99, 10}} {
		s := harness.NodeSpec{Name: fmt.Sprintf("%s-n-%d", ns, i), GPUs: len(util), GPUMemory: 16 * harness.GiB, Labels: map[string]string{groupLabel: ns}}
		if err := e.cp.CreateNode(ctx, s, now); err != nil { // with its GPUNode row and Lease
			t.Fatal(err)
		}
		row := s.GPUNode(now)
		for g, u := range util {
			row.Status.GPUs[g].UtilizationPercent = u
		}
		row.Status.Summary = v1alpha2.Summarize(row.Status.GPUs)
		if err := harness.PutGPUNode(ctx, e.cp.GPUNodes, row); err != nil {
			t.Fatal(err)
		}
		sl, err := harness.DRASlice(s.Name, len(util), 16*harness.GiB)
		if err != nil {
			t.Fatal(err)
		}
		e.createSlice(t, sl)
	}
	sched := ns + "-sched"
	e.startScheduler(t, sched, "{utilizationThreshold: 90, heartbeatTimeout: 1h}")
	e.fillClaims(t, ns, sched, []filler{{name: "q", req: quarter}})
	got := e.claimDevices(t, ns, "q")["q"]
	if want := ns + "-n-1/gpu-1"; got != want {
		t.Errorf("claim on %s, want %s (the only GPU measured at or below the threshold)", got, want)
	}
	if slices.Contains([]string{ns + "-n-0/gpu-0", ns + "-n-1/gpu-0"}, got) {
		t.Errorf("a GPU measured at 99 %% (threshold 90) got the claim")
	}
	e.draCheck(t, ns)
}
