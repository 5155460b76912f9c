package dra

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuslice/gpuslice/internal/dra/devices"
)

// A share that is not a whole number of millionths (64 of an MPS GPU's 192
// units) is the share the device-plugin path and the share file give it
// (0.333333), not the float quotient (0.3333333333333333): before one
// translation owned the rounding, planClaim kept the quotient, so the group
// it set read back different from what it planned and from a pod asking the same.
func TestPlanShareRoundedAsTheShareFile(t *testing.T) {
	gpus := map[string]GPU{"gpu-2": {UUID: "GPU-c", MemoryBytes: 24 * gib, Units: 192, MPS: true}}
	c := claim("u", 0, 0)
	c.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: DriverName,
		Pool: "node-a", Device: "gpu-2", ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
			devices.CapacityUnits: *resource.NewQuantity(64, resource.DecimalSI)}}}
	p, err := planClaim(c, "node-a", gpus)
	if err != nil {
		t.Fatal(err)
	}
	if p.settings.Share != 0.333333 {
		t.Fatalf("share %v, want 0.333333 (64 of 192 units, to a millionth as the share file holds it)", p.settings.Share)
	}
}
