package sched

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestDRARoomless: node n has two GPUs of 100 units and 16 GiB; gpu-0 holds
// 50 units and 8 GiB, gpu-1 is tainted (not counted): 50 units and 8 GiB
// free in all. Shares asking 50 units together fit by the sums (the
// allocator decides), 50+50 do not, nor 10 units with 9 GiB; a whole-device
// claim is never judged by sums.
func TestDRARoomless(t *testing.T) {
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	dev := func(name string) resourceapi.Device {
		return resourceapi.Device{Name: name, AllowMultipleAllocations: ptr.To(true),
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{capUnits: {Value: q(100)}, capMemory: {Value: q(16 << 30)}}}
	}
	tainted := dev("gpu-1")
	tainted.Taints = []resourceapi.DeviceTaint{{Key: "busy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	f := &fakeDRA{slices: []*resourceapi.ResourceSlice{{Spec: resourceapi.ResourceSliceSpec{Driver: testDriver, NodeName: ptr.To("n"),
		Pool: resourceapi.ResourcePool{Name: "n"}, Devices: []resourceapi.Device{dev("gpu-0"), tainted}}}}}
	held := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "held"}}
	held.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Driver: testDriver, Pool: "n", Device: "gpu-0", ShareID: ptr.To(types.UID("s")),
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{capUnits: q(50), capMemory: q(8 << 30)}}}}}
	f.claims = []*resourceapi.ResourceClaim{held}
	env := &draEnv{dra: f}
	claims := func(cs ...*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim { return cs }
	for _, c := range []struct {
		name   string
		claims []*resourceapi.ResourceClaim
		want   bool
	}{
		{"50 units", claims(shareClaim(50, 8)), false},
		{"25+25 units", claims(shareClaim(25, 4), shareClaim(25, 4)), false},
		{"50+50 units", claims(shareClaim(50, 1), shareClaim(50, 1)), true},
		{"9 GiB", claims(shareClaim(10, 9)), true},
		{"whole device", claims(shareClaim(0, 0), shareClaim(50, 1), shareClaim(50, 1)), false},
	} {
		v := &draFilterView{}
		if got := v.roomless(env, state(t, f), "n", c.claims); got != c.want {
			t.Errorf("%s: roomless %v, want %v", c.name, got, c.want)
		}
	}
}
