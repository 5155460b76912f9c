package sched

import (
	"fmt"
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// fakeDRA serves slices and claims (the methods the candidates read).
type fakeDRA struct {
	fwk.SharedDRAManager
	slices []*resourceapi.ResourceSlice
	claims []*resourceapi.ResourceClaim
}

type fakeSlices struct{ s []*resourceapi.ResourceSlice }

func (f fakeSlices) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) { return f.s, nil }

type fakeClaims struct {
	fwk.ResourceClaimTracker
	c []*resourceapi.ResourceClaim
}

func (f fakeClaims) List() ([]*resourceapi.ResourceClaim, error) { return f.c, nil }

// GatherAllocatedState is the tracker's state of the allocated claims.
func (f fakeClaims) GatherAllocatedState() (*structured.AllocatedState, error) {
	st := &structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	for _, c := range f.c {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if r.ShareID == nil {
				st.AllocatedDevices.Insert(id)
				continue
			}
			st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
		}
	}
	return st, nil
}

func (f *fakeDRA) ResourceSlices() fwk.ResourceSliceLister  { return fakeSlices{f.slices} }
func (f *fakeDRA) ResourceClaims() fwk.ResourceClaimTracker { return fakeClaims{c: f.claims} }

func state(t *testing.T, f *fakeDRA) *structured.AllocatedState {
	t.Helper()
	st, err := f.ResourceClaims().GatherAllocatedState()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestDRACandidates: nodes n0 (80 units held), n1 (50 held), n2 (empty),
// n3 (empty, not matching the pod's node selector); a share of 30 units:
// n0 has no room; binpack ranks n1 before n2, spread n2 before n1.
func TestDRACandidates(t *testing.T) {
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	f := &fakeDRA{}
	var nis []fwk.NodeInfo
	for i, held := range []int64{80, 50, 0, 0} {
		node := fmt.Sprintf("n%d", i)
		f.slices = append(f.slices, &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: testDriver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node}, Devices: []resourceapi.Device{{Name: "gpu-0", AllowMultipleAllocations: ptr.To(true),
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": {StringValue: ptr.To("GPU-" + node)}},
				Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{capUnits: {Value: q(100)}, capMemory: {Value: q(16 << 30)}}}}}})
		ni := nodeInfo(node)
		if i < 3 {
			ni.Node().Labels = map[string]string{"group": "g"}
		}
		nis = append(nis, ni)
		if held == 0 {
			continue
		}
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: node}}
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Driver: testDriver, Pool: node, Device: "gpu-0", ShareID: ptr.To(types.UID(node)),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{capUnits: q(held), capMemory: q(1 << 30)}}}}}
		f.claims = append(f.claims, c)
	}
	env := &draEnv{dra: f}
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"group": "g"}}}
	need := claimNeed{units: 30, bytes: 1 << 30}
	for _, c := range []struct {
		policy api.Placement
		want   []string
	}{{api.PlacementBinpack, []string{"n1", "n2"}}, {api.PlacementSpread, []string{"n2", "n1"}}, {api.PlacementFirstFit, []string{"n1", "n2"}}} {
		got, err := env.draCandidates(pod, nis, nil, state(t, f), nil, need, c.policy, 5)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: candidates %v, want %v", c.policy, got, c.want)
		}
	}
	for policy, want := range map[api.Placement]string{api.PlacementBinpack: "n1", api.PlacementSpread: "n2"} {
		if got, _ := env.draCandidates(pod, nis, nil, state(t, f), nil, need, policy, 1); !slices.Equal(got, []string{want}) {
			t.Errorf("%s, one candidate: %v, want [%s]", policy, got, want)
		}
	}
	if got, _ := env.draCandidates(pod, nis, nil, state(t, f), nil, claimNeed{units: 60, bytes: 1 << 30}, api.PlacementBinpack, 5); !slices.Equal(got, []string{"n2"}) {
		t.Errorf("60 units: candidates %v, want [n2]", got)
	}
	// n1's GPU measured above the utilization threshold: not a candidate.
	if got, _ := env.draCandidates(pod, nis, nil, state(t, f), map[string]bool{"GPU-n1": true}, need, api.PlacementBinpack, 5); !slices.Equal(got, []string{"n2"}) {
		t.Errorf("n1's GPU busy: candidates %v, want [n2]", got)
	}
	if !narrowable([]*resourceapi.ResourceClaim{shareClaim(30, 1)}) || narrowable([]*resourceapi.ResourceClaim{shareClaim(0, 0)}) {
		t.Error("narrowable: a share of units and memory is, a whole-device request is not")
	}
}

// TestTopNodesOneEntryPerNode: a node of several slices (one entry each)
// is named once, ranked by its best entry.
func TestTopNodesOneEntryPerNode(t *testing.T) {
	fits := []nodeFit{{"a", 1.5}, {"b", 1.0}, {"a", 0.2}, {"c", 0.8}, {"b", 1.9}}
	if got := topNodes(fits, api.PlacementBinpack, 3); !slices.Equal(got, []string{"a", "c", "b"}) {
		t.Errorf("binpack: %v, want [a c b]", got)
	}
	if got := topNodes(fits, api.PlacementSpread, 2); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("spread: %v, want [b a]", got)
	}
}

// TestTopNodesIsBestPerNode: topNodes is the k best of each node's best
// fit (by better), for fits in any order, several per node, ties included.
func TestTopNodesIsBestPerNode(t *testing.T) {
	seed := uint32(7)
	next := func(n uint32) uint32 { seed = seed*1664525 + 1013904223; return (seed >> 8) % n }
	for _, policy := range []api.Placement{api.PlacementBinpack, api.PlacementSpread, api.PlacementFirstFit} {
		for round := range 200 {
			var fits []nodeFit
			for range int(next(40)) {
				fits = append(fits, nodeFit{node: fmt.Sprintf("n%d", next(12)), left: float64(next(6)) / 4})
			}
			k := 1 + round%6
			best := map[string]nodeFit{}
			for _, f := range fits {
				if g, ok := best[f.node]; !ok || f.better(g, policy) {
					best[f.node] = f
				}
			}
			var want []nodeFit
			for _, f := range best {
				want = append(want, f)
			}
			sort.Slice(want, func(i, j int) bool { return want[i].better(want[j], policy) })
			var names []string
			for _, f := range want[:min(k, len(want))] {
				names = append(names, f.node)
			}
			if got := topNodes(fits, policy, k); !slices.Equal(got, names) && len(got)+len(names) > 0 {
				t.Fatalf("%s, k %d, fits %v: %v, want %v", policy, k, fits, got, names)
			}
		}
	}
}

// TestNodeMatchIndexed: past the nodes it looks up by a scan, nodeMatch
// answers the same from its index.
func TestNodeMatchIndexed(t *testing.T) {
	var nis []fwk.NodeInfo
	for i := range 3 * nodeScans {
		ni := framework.NewNodeInfo()
		ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%02d", i), Labels: map[string]string{"even": fmt.Sprint(i%2 == 0)}}})
		nis = append(nis, ni)
	}
	m := newNodeMatch(&corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"even": "true"}}}, nis)
	for round := range 2 {
		for i := 3*nodeScans + 1; i >= 0; i-- {
			if got, want := m.admits(fmt.Sprintf("n%02d", i)), i%2 == 0 && i < 3*nodeScans; got != want {
				t.Errorf("round %d: admits(n%02d) = %v, want %v", round, i, got, want)
			}
		}
	}
	if m.nodes.byName == nil {
		t.Errorf("no index after %d nodes asked", 3*nodeScans)
	}
}

// TestNodeMatchAdmits: nodeMatch answers by name what the pod's selector
// and required affinity admit among the nodes listed, asked in any order
// and twice; a node not listed is not admitted; a pod with neither admits
// every name.
func TestNodeMatchAdmits(t *testing.T) {
	var nis []fwk.NodeInfo
	for name, group := range map[string]string{"a": "g", "b": "h", "c": "g"} {
		ni := framework.NewNodeInfo()
		ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"group": group}}})
		nis = append(nis, ni)
	}
	byField := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}}}}}}
	cases := []struct {
		name string
		spec corev1.PodSpec
		want map[string]bool
	}{
		{"selector", corev1.PodSpec{NodeSelector: map[string]string{"group": "g"}}, map[string]bool{"a": true, "b": false, "c": true, "z": false}},
		{"affinity by name", corev1.PodSpec{Affinity: byField}, map[string]bool{"a": false, "b": true, "c": false, "z": false}},
		{"both", corev1.PodSpec{NodeSelector: map[string]string{"group": "g"}, Affinity: byField}, map[string]bool{"a": false, "b": false, "c": false}},
		{"neither", corev1.PodSpec{}, map[string]bool{"a": true, "b": true, "z": true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newNodeMatch(&corev1.Pod{Spec: tc.spec}, nis)
			if (m == nil) != (tc.name == "neither") {
				t.Fatalf("nodeMatch nil %v", m == nil)
			}
			for range 2 {
				for _, name := range []string{"z", "c", "b", "a"} {
					if want, asked := tc.want[name]; asked && m.admits(name) != want {
						t.Errorf("admits(%s) = %v, want %v", name, !want, want)
					}
				}
			}
		})
	}
}
