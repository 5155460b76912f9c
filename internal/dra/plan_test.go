package dra

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuslice/gpuslice/internal/dra/devices"
)

// Capacity accounting: what a claim consumes on each device becomes its
// group's share and memory limit (the smallest over its devices); a device of
// another driver or pool is not this node's to prepare.
func TestPlanCapacity(t *testing.T) {
	gpus := map[string]GPU{
		"gpu-0": {UUID: "GPU-a", MemoryBytes: 16 * gib, Units: 100},
		"gpu-1": {UUID: "GPU-b", MemoryBytes: 16 * gib, Units: 100},
		"gpu-2": {UUID: "GPU-c", MemoryBytes: 24 * gib, Units: 192, MPS: true},
	}
	res := func(dev string, units, mem int64) resourceapi.DeviceRequestAllocationResult {
		r := resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: DriverName, Pool: "node-a", Device: dev}
		if units >= 0 {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
				devices.CapacityUnits: *resource.NewQuantity(units, resource.DecimalSI), devices.CapacityMemory: *resource.NewQuantity(mem, resource.BinarySI)}
		}
		return r
	}
	for _, tc := range []struct {
		name    string
		results []resourceapi.DeviceRequestAllocationResult
		share   float64
		mem     uint64
		n       int
		gateOff bool
		err     string
	}{
		{name: "quarter", results: []resourceapi.DeviceRequestAllocationResult{res("gpu-0", 25, 4*gib)}, share: 0.25, mem: uint64(4 * gib), n: 1},
		{name: "whole by capacity", results: []resourceapi.DeviceRequestAllocationResult{res("gpu-0", 100, 16*gib)}, n: 1},
		{name: "whole without capacity", results: []resourceapi.DeviceRequestAllocationResult{res("gpu-0", -1, 0)}, n: 1},
		{name: "two devices, smallest", results: []resourceapi.DeviceRequestAllocationResult{res("gpu-0", 50, 8*gib), res("gpu-1", 30, 6*gib)},
			share: 0.3, mem: uint64(6 * gib), n: 2},
		{name: "mps units of its total", results: []resourceapi.DeviceRequestAllocationResult{res("gpu-2", 48, 4*gib)}, share: 0.25,
			mem: uint64(4 * gib), n: 1, gateOff: true},
		{name: "memory only", results: []resourceapi.DeviceRequestAllocationResult{res("gpu-0", 100, 2*gib)}, mem: uint64(2 * gib), n: 1},
		{name: "other driver skipped", results: []resourceapi.DeviceRequestAllocationResult{res("gpu-0", 25, 4*gib),
			{Driver: "gpu.nvidia.com", Pool: "node-a", Device: "gpu-0"}}, share: 0.25, mem: uint64(4 * gib), n: 1},
		{name: "other pool only", results: []resourceapi.DeviceRequestAllocationResult{{Driver: DriverName, Pool: "node-b", Device: "gpu-0"}}, err: "no device"},
		{name: "unknown device", results: []resourceapi.DeviceRequestAllocationResult{res("gpu-9", 25, gib)}, err: "gpu-9 is not a GPU of this node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := claim("u", 0, 0)
			c.Status.Allocation.Devices.Results = tc.results
			p, err := planClaim(c, "node-a", gpus)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("planClaim = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.settings.Share != tc.share || p.settings.MemoryMax != tc.mem || len(p.devices) != tc.n || p.gateOff != tc.gateOff {
				t.Fatalf("plan %+v, want share %v memory %d devices %d gateOff %v", p, tc.share, tc.mem, tc.n, tc.gateOff)
			}
		})
	}
	c := claim("u", 25, 4*gib)
	c.Status.Allocation = nil
	if _, err := planClaim(c, "node-a", gpus); err == nil {
		t.Fatal("unallocated claim planned")
	}
}
