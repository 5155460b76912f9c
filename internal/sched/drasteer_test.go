package sched

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// steerFixture: node n0's slice: gpu-0 empty, a device of another shape
// (no units), gpu-1 with 50 units held, gpu-2 with 25, gpu-3 empty; node
// n1's slice: two empty GPUs.
func steerFixture() *fakeDRA {
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	gpu := func(node, name string) resourceapi.Device {
		return resourceapi.Device{Name: name, AllowMultipleAllocations: ptr.To(true),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": {StringValue: ptr.To("GPU-" + node + "-" + name)}},
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{capUnits: {Value: q(100)}, capMemory: {Value: q(100)}}}
	}
	f := &fakeDRA{}
	f.slices = append(f.slices, &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: testDriver, NodeName: ptr.To("n0"),
		Pool: resourceapi.ResourcePool{Name: "n0"}, Devices: []resourceapi.Device{gpu("n0", "gpu-0"), {Name: "other"},
			gpu("n0", "gpu-1"), gpu("n0", "gpu-2"), gpu("n0", "gpu-3")}}})
	f.slices = append(f.slices, &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: testDriver, NodeName: ptr.To("n1"),
		Pool: resourceapi.ResourcePool{Name: "n1"}, Devices: []resourceapi.Device{gpu("n1", "gpu-0"), gpu("n1", "gpu-1")}}})
	for dev, held := range map[string]int64{"gpu-1": 50, "gpu-2": 25} {
		c := &resourceapi.ResourceClaim{}
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Driver: testDriver, Pool: "n0", Device: dev, ShareID: ptr.To(types.UID(dev)),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{capUnits: q(held), capMemory: q(held)}}}}}
		f.claims = append(f.claims, c)
	}
	return f
}

func deviceNames(s *resourceapi.ResourceSlice) []string {
	var out []string
	for _, d := range s.Spec.Devices {
		out = append(out, d.Name)
	}
	return out
}

// TestDeviceView: during a pod's PreFilter the slices are listed with the
// shared devices in policy order (the other device in its place) and busy
// GPUs left out; untouched slices (n1: all empty, none busy) and every
// slice outside a PreFilter are the informer's own objects.
func TestDeviceView(t *testing.T) {
	for _, c := range []struct {
		name   string
		policy api.Placement
		busy   map[string]bool
		n0     []string
		n1     []string // nil: n1's slice itself
	}{
		{"binpack", api.PlacementBinpack, nil, []string{"gpu-1", "other", "gpu-2", "gpu-0", "gpu-3"}, nil},
		{"spread", api.PlacementSpread, nil, []string{"gpu-0", "other", "gpu-3", "gpu-2", "gpu-1"}, nil},
		{"first fit", api.PlacementFirstFit, nil, []string{"gpu-0", "other", "gpu-1", "gpu-2", "gpu-3"}, nil},
		{"binpack, busy", api.PlacementBinpack, map[string]bool{"GPU-n0-gpu-1": true, "GPU-n1-gpu-0": true},
			[]string{"gpu-2", "other", "gpu-0", "gpu-3"}, []string{"gpu-1"}},
		{"first fit, busy", api.PlacementFirstFit, map[string]bool{"GPU-n0-gpu-0": true}, []string{"gpu-1", "other", "gpu-2", "gpu-3"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := steerFixture()
			s := &steer{}
			m := steeredManager{SharedDRAManager: f, s: s}
			before := deviceNames(f.slices[0])
			if got, _ := m.ResourceSlices().ListWithDeviceTaintRules(); got[0] != f.slices[0] || got[1] != f.slices[1] {
				t.Fatal("outside a PreFilter: not the slices as published")
			}
			cyc := &steerCycle{policy: c.policy, busy: c.busy}
			s.cur.Store(cyc)
			if _, err := m.ResourceClaims().GatherAllocatedState(); err != nil || cyc.state.Load() == nil {
				t.Fatalf("the allocated state the plugin gathers is not recorded (%v)", err)
			}
			got, err := m.ResourceSlices().ListWithDeviceTaintRules()
			if err != nil {
				t.Fatal(err)
			}
			if n0 := deviceNames(got[0]); !slices.Equal(n0, c.n0) {
				t.Errorf("n0's devices %v, want %v", n0, c.n0)
			}
			switch {
			case c.n1 == nil && got[1] != f.slices[1]:
				t.Errorf("n1's slice copied: %v", deviceNames(got[1]))
			case c.n1 != nil && !slices.Equal(deviceNames(got[1]), c.n1):
				t.Errorf("n1's devices %v, want %v", deviceNames(got[1]), c.n1)
			}
			if !slices.Equal(deviceNames(f.slices[0]), before) {
				t.Errorf("the informer's slice was changed: %v", deviceNames(f.slices[0]))
			}
		})
	}
}

// TestDeviceViewCandidates: with candidate nodes, the view shows only
// their slices (and slices of no node), still in policy order.
func TestDeviceViewCandidates(t *testing.T) {
	f := steerFixture()
	f.slices = append(f.slices, &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: "other.example.com",
		Pool: resourceapi.ResourcePool{Name: "net"}, AllNodes: ptr.To(true), Devices: []resourceapi.Device{{Name: "nic"}}}})
	st, err := f.ResourceClaims().GatherAllocatedState()
	if err != nil {
		t.Fatal(err)
	}
	s := &steer{}
	got := s.view(onlyOf(f.slices, []string{"n0"}), &steerCycle{policy: api.PlacementBinpack}, st, len(f.slices))
	if len(got) != 2 || *got[0].Spec.NodeName != "n0" || got[1] != f.slices[2] {
		t.Fatalf("view of candidate n0: %d slices, want n0's and the one of all nodes", len(got))
	}
	if want := []string{"gpu-1", "other", "gpu-2", "gpu-0", "gpu-3"}; !slices.Equal(deviceNames(got[0]), want) {
		t.Errorf("n0's devices %v, want %v", deviceNames(got[0]), want)
	}
}

// TestDeviceViewRefused: a pod with one share that no device has free
// (101 units) is refused by GPUSlice's PreFilter once the view found no
// candidate: the view lists the slices as published (no copy ordered for
// an allocator that will not run). A pod with two claims is not refused
// there (the allocator decides): its view is still ordered.
func TestDeviceViewRefused(t *testing.T) {
	for _, c := range []struct {
		name      string
		refused   bool
		published bool
	}{
		{"one share, no room", true, true},
		{"several claims, no room", false, false},
	} {
		f := steerFixture()
		s := &steer{}
		m := steeredManager{SharedDRAManager: f, s: s}
		nar := &narrowing{env: &draEnv{dra: f}, pod: &corev1.Pod{}, need: claimNeed{units: 101, bytes: 1}, k: 4, refused: c.refused}
		cyc := &steerCycle{policy: api.PlacementBinpack, narrow: nar}
		s.cur.Store(cyc)
		if _, err := m.ResourceClaims().GatherAllocatedState(); err != nil {
			t.Fatal(err)
		}
		got, err := m.ResourceSlices().ListWithDeviceTaintRules()
		if err != nil {
			t.Fatal(err)
		}
		if cs := cyc.cands.Load(); cs == nil || len(cs.names) != 0 {
			t.Fatalf("%s: candidates %v, want none", c.name, cs)
		}
		if published := got[0] == f.slices[0]; published != c.published {
			t.Errorf("%s: n0's slice as published %v (devices %v), want %v", c.name, published, deviceNames(got[0]), c.published)
		}
	}
}

// TestUsageFromCandidateSlices: PreScore's device use read from the
// slices the view kept for the candidates is the one read from every
// slice; with a node scored that is not a candidate, the slices are not used.
func TestUsageFromCandidateSlices(t *testing.T) {
	f := steerFixture()
	st := state(t, f)
	env := &draEnv{dra: f}
	full, err := env.usage(sets.New("n0"), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs := candSlices{names: sets.New("n0"), slices: onlyOf(f.slices, []string{"n0"})}
	if len(cs.slices) != 1 {
		t.Fatalf("candidate slices %d, want n0's", len(cs.slices))
	}
	got, err := env.usage(sets.New("n0"), st, cs.of(sets.New("n0")))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["n0"] == nil || *got["n0"] != *full["n0"] {
		t.Fatalf("use from the candidates' slices %+v, want %+v", got["n0"], full["n0"])
	}
	if cs.of(sets.New("n0", "n1")) != nil || (candSlices{}).of(sets.New("n0")) != nil {
		t.Error("slices used for a node that is not a candidate")
	}
	// The table keeps the other slices' entries for a partial read.
	env.table.devices(f.slices)
	env.table.devicesOf(cs.slices, 0)
	if len(env.table.bySlice) != len(f.slices) {
		t.Errorf("table %d entries after a partial read, want %d", len(env.table.bySlice), len(f.slices))
	}
}
