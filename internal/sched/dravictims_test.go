package sched

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

const testDriver = "gpuslice.io"

type classList []*resourceapi.DeviceClass

func (c classList) List() ([]*resourceapi.DeviceClass, error) { return c, nil }
func (c classList) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, x := range c {
		if x.Name == name {
			return x, nil
		}
	}
	return nil, fmt.Errorf("class %s not found", name)
}

// testNode: one node of gpus shared devices (100 units, 16 GiB each) of the
// gpuslice.io driver, and held claims: per entry, the pod reserving it
// (several: shared), the device index, units and GiB (units 0: whole).
type heldClaim struct {
	pods  []string
	dev   int
	units int64
	gib   int64
}

func testDRANode(t *testing.T, gpus int, held []heldClaim) *draNode {
	t.Helper()
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	var devs []resourceapi.Device
	for i := range gpus {
		devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i), AllowMultipleAllocations: ptr.To(true),
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{capUnits: {Value: q(100)}, capMemory: {Value: q(16 << 30)}}})
	}
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: resourceapi.ResourceSliceSpec{Driver: testDriver,
		NodeName: ptr.To("n"), Pool: resourceapi.ResourcePool{Name: "n", Generation: 1, ResourceSliceCount: 1}, Devices: devs}}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "share"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + testDriver + `"`}}}}}
	n := &draNode{features: structured.Features{ConsumableCapacity: true}, classes: classList{class},
		cel: cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}), node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}},
		slices: []*resourceapi.ResourceSlice{slice}, pools: sets.New(poolKey(testDriver, "n")), devices: map[structured.DeviceID]resourceapi.Device{}}
	for _, d := range devs {
		n.devices[structured.MakeDeviceID(testDriver, "n", d.Name)] = d
	}
	for i, h := range held {
		units, mem := h.units, h.gib<<30
		if units == 0 {
			units, mem = 100, 16<<30
		}
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i), UID: types.UID(fmt.Sprintf("claim-%d", i))}}
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: testDriver, Pool: "n", Device: fmt.Sprintf("gpu-%d", h.dev), ShareID: ptr.To(types.UID(fmt.Sprintf("share-%d", i))),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{capUnits: q(units), capMemory: q(mem)}}}}}
		for _, p := range h.pods {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID(p)})
		}
		n.held = append(n.held, c)
	}
	return n
}

func shareClaim(units, gib int64) *resourceapi.ResourceClaim {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: "share", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	if units > 0 {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			capUnits: *resource.NewQuantity(units, resource.DecimalSI), capMemory: *resource.NewQuantity(gib<<30, resource.BinarySI)}}
	}
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "want", UID: "want"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}}}}}
}

func victims(prios map[string]int32, order ...string) []alloc.Victim {
	out := make([]alloc.Victim, len(order))
	for i, u := range order {
		out[i] = alloc.Victim{UID: u, Priority: prios[u]}
	}
	return out
}

func TestDRAVictims(t *testing.T) {
	zero := map[string]int32{}
	tests := []struct {
		name  string
		gpus  int
		held  []heldClaim
		want  []*resourceapi.ResourceClaim
		gone  []string
		cands []alloc.Victim
		prios map[string]int32
		out   []string // nil: none needed
		err   error
	}{
		{name: "fits already", gpus: 1, held: []heldClaim{{pods: []string{"a"}, units: 50, gib: 1}},
			want: []*resourceapi.ResourceClaim{shareClaim(50, 1)}, cands: victims(zero, "a")},
		{name: "fewest on one device", gpus: 1,
			held: []heldClaim{{pods: []string{"a"}, units: 20, gib: 1}, {pods: []string{"big"}, units: 60, gib: 1}, {pods: []string{"b"}, units: 20, gib: 1}},
			want: []*resourceapi.ResourceClaim{shareClaim(50, 1)}, cands: victims(zero, "a", "big", "b"), out: []string{"big"}},
		{name: "memory decides", gpus: 1,
			held: []heldClaim{{pods: []string{"m0"}, units: 10, gib: 2}, {pods: []string{"m1"}, units: 10, gib: 8}, {pods: []string{"m2"}, units: 10, gib: 2}, {pods: []string{"m3"}, units: 10, gib: 4}},
			want: []*resourceapi.ResourceClaim{shareClaim(10, 8)}, cands: victims(zero, "m0", "m1", "m2", "m3"), out: []string{"m1"}},
		{name: "lowest priority among devices", gpus: 2,
			held: []heldClaim{{pods: []string{"hi"}, dev: 0}, {pods: []string{"lo"}, dev: 1}},
			want: []*resourceapi.ResourceClaim{shareClaim(0, 0)}, prios: map[string]int32{"hi": 500, "lo": 0},
			cands: victims(map[string]int32{"hi": 500, "lo": 0}, "lo", "hi"), out: []string{"lo"}},
		{name: "a shared claim frees nothing", gpus: 1,
			held:  []heldClaim{{pods: []string{"s0", "s1"}, units: 50, gib: 1}, {pods: []string{"own"}, units: 50, gib: 1}},
			want:  []*resourceapi.ResourceClaim{shareClaim(50, 1)},
			cands: victims(map[string]int32{"own": 100}, "s0", "own"), out: []string{"own"}},
		{name: "a shared claim frees nothing and nothing else does", gpus: 1,
			held: []heldClaim{{pods: []string{"s0", "s1"}, units: 60, gib: 1}, {pods: []string{"own"}, units: 40, gib: 1}},
			want: []*resourceapi.ResourceClaim{shareClaim(50, 1)}, cands: victims(zero, "s0", "own"), err: alloc.ErrNoVictims},
		{name: "terminating pods count as gone", gpus: 1,
			held: []heldClaim{{pods: []string{"t"}, units: 50, gib: 1}, {pods: []string{"a"}, units: 50, gib: 1}},
			want: []*resourceapi.ResourceClaim{shareClaim(50, 1)}, gone: []string{"t"}, cands: victims(zero, "a")},
		{name: "held capacity of a nominated pod comes first", gpus: 1,
			held: []heldClaim{{pods: []string{"t"}, units: 50, gib: 1}, {pods: []string{"a"}, units: 50, gib: 1}},
			want: []*resourceapi.ResourceClaim{shareClaim(50, 1), shareClaim(50, 1)}, gone: []string{"t"}, cands: victims(zero, "a"), out: []string{"a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := testDRANode(t, tc.gpus, tc.held)
			gone := sets.New[types.UID]()
			for _, g := range tc.gone {
				gone.Insert(types.UID(g))
			}
			want := slices.Clone(tc.want)
			for i, c := range want { // distinct claims
				c = c.DeepCopy()
				c.UID = types.UID(fmt.Sprintf("want-%d", i))
				want[i] = c
			}
			got, err := n.draVictims(context.Background(), want, gone, tc.cands)
			if !errors.Is(err, tc.err) || (err != nil) != (tc.err != nil) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if !slices.Equal(got, tc.out) {
				t.Fatalf("victims %v, want %v", got, tc.out)
			}
		})
	}
}
