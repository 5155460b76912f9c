package agent

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/dra"
	drav1 "github.com/gpuslice/gpuslice/pkg/apis/dra/v1alpha1"
)

// TestClaimsOfPool: the claim informer keeps whole only the claims allocated
// a gpuslice.io device of this node's pool; the rest are cut to their name.
func TestClaimsOfPool(t *testing.T) {
	claim := func(results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "u1", ResourceVersion: "7",
			Annotations:   map[string]string{drav1.ShareConfigAnnotation: "{}"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
		if results != nil {
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
		}
		return c
	}
	here := resourceapi.DeviceRequestAllocationResult{Driver: dra.DriverName, Pool: "node-a", Device: "gpu-0"}
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		whole bool
	}{
		{"not allocated", claim(), false},
		{"another node's pool", claim(resourceapi.DeviceRequestAllocationResult{Driver: dra.DriverName, Pool: "node-b"}), false},
		{"another driver in this pool", claim(resourceapi.DeviceRequestAllocationResult{Driver: "gpu.nvidia.com", Pool: "node-a"}), false},
		{"this node's pool", claim(here), true},
		{"this node's among others", claim(resourceapi.DeviceRequestAllocationResult{Driver: "x.io", Pool: "node-b"}, here), true},
	} {
		got, err := claimsOfPool("node-a")(tc.claim)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c := got.(*resourceapi.ResourceClaim)
		if c.Name != "c" || c.Namespace != "ns" || c.UID != "u1" || c.ResourceVersion != "7" {
			t.Errorf("%s: identity lost: %+v", tc.name, c.ObjectMeta)
		}
		if whole := c.Status.Allocation != nil && len(c.Annotations) == 1 && len(c.ManagedFields) == 1; whole != tc.whole {
			t.Errorf("%s: kept whole %v, want %v", tc.name, whole, tc.whole)
		}
	}
	if got, err := claimsOfPool("node-a")("not a claim"); err != nil || got != "not a claim" {
		t.Errorf("other objects: %v, %v", got, err)
	}
}
