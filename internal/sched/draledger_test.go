package sched

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// ledgerNeeds are shares from the smallest to a whole device, and one no
// device has.
var ledgerNeeds = []claimNeed{{units: 1, bytes: 1}, {units: 50, bytes: 50}, {units: 80, bytes: 90}, {units: 90, bytes: 90},
	{units: 95, bytes: 95}, {units: 100, bytes: 100}, {units: 101, bytes: 1}}

// inFlight signals, for each unallocated claim of a pod, an allocation in
// flight on the pod's node (a share of gpu-3 of size v), written and
// assumed for every other one: what the claim informer has not delivered.
func (w *nomineeWorld) inFlight(t *testing.T, v int64) {
	t.Helper()
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	k := 0
	for _, c := range w.claims {
		if c.Status.Allocation != nil {
			continue
		}
		node := ""
		for n, pods := range w.pods {
			for _, p := range pods {
				if *p.Spec.ResourceClaims[0].ResourceClaimName == c.Name {
					node = n
				}
			}
		}
		if node == "" {
			continue
		}
		a := c.DeepCopy()
		a.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Driver: testDriver, Pool: node, Device: "gpu-3", ShareID: ptr.To(types.UID("flight-" + c.Name)),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{capUnits: q(v), capMemory: q(v)}}}}}
		if err := w.tracker.SignalClaimPendingAllocation(c.UID, a); err != nil {
			t.Fatal(err)
		}
		if k++; k%2 == 0 {
			a.ResourceVersion = "999"
			if err := w.tracker.AssumeClaimAfterAPICall(a); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (w *nomineeWorld) nodeInfos() []fwk.NodeInfo {
	var nis []fwk.NodeInfo
	for i := range 4 {
		nis = append(nis, w.nodeInfo(fmt.Sprintf("n%d", i)))
	}
	return nis
}

// checkLedger compares the ledger's candidates for each need (a pod not
// nominated) with those of the whole gathered state, and the state it
// read for each candidate with the gathered state on that node's pools.
func checkLedger(t *testing.T, what string, w *nomineeWorld, env *draEnv) {
	t.Helper()
	nis := w.nodeInfos()
	full, err := env.allocatedState()
	if err != nil {
		t.Fatal(err)
	}
	for _, need := range ledgerNeeds {
		for _, policy := range []api.Placement{api.PlacementBinpack, api.PlacementSpread} {
			pod := &corev1.Pod{}
			ref, _ := env.candidatesIn(pod, nis, w.slices, full, nil, need, policy, 2, false)
			into := emptyState()
			names, sl, ok := env.ledgerCandidates(pod, nis, w.slices, into, nil, need, policy, 2)
			if !ok {
				t.Errorf("%s, %v, %s: the ledger could not tell", what, need, policy)
				continue
			}
			if fmt.Sprint(names) != fmt.Sprint(ref) {
				t.Errorf("%s, %v, %s: candidates %v, want %v", what, need, policy, names, ref)
			}
			if len(sl) != len(onlyOf(w.slices, names)) {
				t.Errorf("%s, %v, %s: %d slices, want the candidates' %d", what, need, policy, len(sl), len(onlyOf(w.slices, names)))
			}
			for _, n := range names {
				if err := sameState(w.restrict(into, n), w.restrict(full, n)); err != nil {
					t.Errorf("%s, %v, %s: state read for %s: %v", what, need, policy, n, err)
				}
			}
		}
	}
}

// TestLedgerCandidates: in random worlds, the ledger's candidates are the
// whole state's, and the state handed for them is the tracker's there:
// with allocations in flight and written but not delivered (the ledger
// freer than the tracker: its nodes read exactly), and after a release
// put into the tracker and numbered (read again); a release put into the
// tracker and not numbered is not read (the pool's read is kept).
func TestLedgerCandidates(t *testing.T) {
	for seed := range uint64(8) {
		w := newNomineeWorld(t, rand.New(rand.NewPCG(seed, 33)))
		env := &draEnv{dra: worldDRA{SharedDRAManager: w.m, slices: w.slices}, features: structured.Features{ConsumableCapacity: true},
			byPool: w.byPool, changes: newClaimChanges()}
		checkLedger(t, fmt.Sprintf("seed %d", seed), w, env)
		w.inFlight(t, 30)
		checkLedger(t, fmt.Sprintf("seed %d, in flight", seed), w, env)
		// A share released: the claim deallocated in the tracker.
		var rel *resourceapi.ResourceClaim
		for _, c := range w.claims {
			if tc, err := w.tracker.Get(c.Namespace, c.Name); err == nil && tc.Status.Allocation != nil && tc.Status.Allocation.Devices.Results[0].ShareID != nil &&
				tc.Status.Allocation.Devices.Results[0].AdminAccess == nil {
				rel = tc
				break
			}
		}
		if rel == nil {
			continue
		}
		d := rel.DeepCopy()
		d.Status.Allocation, d.ResourceVersion = nil, "1000"
		if err := w.tracker.AssumeClaimAfterAPICall(d); err != nil {
			t.Fatal(err)
		}
		pool := rel.Status.Allocation.Devices.Results[0].Pool
		lp := env.table.ledger[poolKey(testDriver, pool)]
		if lp == nil || lp.st == nil || !lp.st.AllocatedSharedDeviceIDs.Has(structured.MakeSharedDeviceID(
			structured.MakeDeviceID(testDriver, pool, rel.Status.Allocation.Devices.Results[0].Device), rel.Status.Allocation.Devices.Results[0].ShareID)) {
			t.Fatalf("seed %d: the ledger's pool %s does not hold the share before its release", seed, pool)
		}
		env.ledgerCandidates(&corev1.Pod{}, w.nodeInfos(), w.slices, emptyState(), nil, ledgerNeeds[0], "binpack", 2)
		if lp.st == nil || !lp.st.AllocatedSharedDeviceIDs.Has(structured.MakeSharedDeviceID(
			structured.MakeDeviceID(testDriver, pool, rel.Status.Allocation.Devices.Results[0].Device), rel.Status.Allocation.Devices.Results[0].ShareID)) {
			t.Errorf("seed %d: pool %s read again with no change numbered", seed, pool)
		}
		env.changes.touchAllocated(rel)
		checkLedger(t, fmt.Sprintf("seed %d, released", seed), w, env)
	}
}

// TestLedgerRefuses: where the ledger cannot stand for the tracker's
// state it says so (the caller gathers the whole state).
func TestLedgerRefuses(t *testing.T) {
	w := newNomineeWorld(t, rand.New(rand.NewPCG(5, 6)))
	on := structured.Features{ConsumableCapacity: true}
	netSlice := noNodeSlice() // (dranominee_test.go)
	for _, c := range []struct {
		name   string
		env    *draEnv
		slices []*resourceapi.ResourceSlice
	}{
		{"consumable capacity off", &draEnv{dra: w.m, byPool: w.byPool, changes: newClaimChanges()}, w.slices},
		{"no pool index", &draEnv{dra: w.m, features: on, changes: newClaimChanges()}, w.slices},
		{"no change numbers", &draEnv{dra: w.m, features: on, byPool: w.byPool}, w.slices},
		{"a slice of no node", &draEnv{dra: w.m, features: on, byPool: w.byPool, changes: newClaimChanges()},
			append([]*resourceapi.ResourceSlice{netSlice}, w.slices...)},
	} {
		if _, _, ok := c.env.ledgerCandidates(&corev1.Pod{}, w.nodeInfos(), c.slices, emptyState(), nil, ledgerNeeds[0], "binpack", 2); ok {
			t.Errorf("%s: the ledger told", c.name)
		}
	}
}

// newFullWorld is nodes nodes of one device (100 units, 100 bytes), each
// held by two shares of 50 of claims of pods on the node: for the first
// flights nodes the second share is in flight (signalled, not in the
// claim: the ledger counts it free), and the free nodes have no second
// claim at all.
func newFullWorld(t *testing.T, nodes, flights int, free ...int) *nomineeWorld {
	t.Helper()
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	share := func(node, id string) *resourceapi.AllocationResult {
		return &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Driver: testDriver, Pool: node, Device: "gpu-0", ShareID: ptr.To(types.UID(id)),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{capUnits: q(50), capMemory: q(50)}}}}}
	}
	w := &nomineeWorld{pods: map[string][]*corev1.Pod{}}
	pending := map[types.UID]*resourceapi.ResourceClaim{}
	for i := range nodes {
		node := fmt.Sprintf("n%03d", i)
		w.slices = append(w.slices, &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: testDriver,
			NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node}, Devices: []resourceapi.Device{{Name: "gpu-0",
				AllowMultipleAllocations: ptr.To(true), Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					capUnits: {Value: q(100)}, capMemory: {Value: q(100)}}}}}})
		for h := range 2 {
			if h == 1 && slices.Contains(free, i) {
				continue
			}
			name := fmt.Sprintf("c-%s-%d", node, h)
			c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"}}
			if a := share(node, "s-"+name); h == 0 || i >= flights {
				c.Status.Allocation = a
			} else {
				p := c.DeepCopy()
				p.Status.Allocation = a
				pending[c.UID] = p
			}
			w.claims = append(w.claims, c)
			w.pods[node] = append(w.pods[node], &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-" + name, UID: types.UID("pod-" + name)},
				Spec: corev1.PodSpec{NodeName: node, ResourceClaims: []corev1.PodResourceClaim{{Name: "r", ResourceClaimName: ptr.To(name)}}}})
		}
	}
	w.start(t)
	for uid, a := range pending {
		if err := w.tracker.SignalClaimPendingAllocation(uid, a); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// TestLedgerFullCluster: every node the ledger counts with the share free
// is taken by an allocation in flight: the ledger tells no node (a
// preemptor refused without the whole state), unless more nodes than it
// reads are so (then the state is gathered); a node really free is the
// candidate.
func TestLedgerFullCluster(t *testing.T) {
	need := claimNeed{units: 50, bytes: 50}
	for _, c := range []struct {
		name           string
		nodes, flights int
		free           []int
		ok             bool
		want           string
	}{
		{"three in flight", 10, 3, nil, true, "[]"},
		{"three in flight, one free", 10, 3, []int{7}, true, "[n007]"},
		{"more in flight than the ledger reads", ledgerHint + 6, ledgerHint + 6, nil, false, "[]"},
		{"more in flight than the ledger reads, one free", ledgerHint + 6, ledgerHint + 5, []int{ledgerHint + 5}, false, "[]"},
	} {
		w := newFullWorld(t, c.nodes, c.flights, c.free...)
		var nis []fwk.NodeInfo
		for i := range c.nodes {
			nis = append(nis, w.nodeInfo(fmt.Sprintf("n%03d", i)))
		}
		env := &draEnv{dra: worldDRA{SharedDRAManager: w.m, slices: w.slices}, features: structured.Features{ConsumableCapacity: true},
			byPool: w.byPool, changes: newClaimChanges()}
		full, err := env.allocatedState()
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := env.candidatesIn(&corev1.Pod{}, nis, w.slices, full, nil, need, api.PlacementBinpack, 2, false)
		names, _, ok := env.ledgerCandidates(&corev1.Pod{}, nis, w.slices, emptyState(), nil, need, api.PlacementBinpack, 2)
		if ok != c.ok || fmt.Sprint(names) != c.want {
			t.Errorf("%s: candidates %v, told %v; want %s, %v", c.name, names, ok, c.want, c.ok)
		}
		if ok && fmt.Sprint(names) != fmt.Sprint(ref) {
			t.Errorf("%s: candidates %v, the whole state's %v", c.name, names, ref)
		}
	}
}

// TestLedgerView: a first try's PreFilter hands the DynamicResources
// plugin no whole state: in a full cluster (every free share taken in
// flight) an empty one and no slice, for a pod GPUSlice's PreFilter
// refuses; the state of the ledger's candidates, and their slices alone,
// where one is free; and the whole state, in place, for a pod that is not
// refused when no node has the share.
func TestLedgerView(t *testing.T) {
	for _, c := range []struct {
		name    string
		free    []int
		refused bool
		// want: the candidates; listed: the slices the plugin is shown
		// (-1: all); whole: the state handed over is the whole state.
		want   string
		listed int
		whole  bool
	}{
		{"full, refused", nil, true, "[]", 0, false},
		{"one free", []int{7}, true, "[n007]", 1, false},
		{"full, not refused", nil, false, "[]", -1, true},
	} {
		w := newFullWorld(t, 10, 3, c.free...)
		d := worldDRA{SharedDRAManager: w.m, slices: w.slices}
		var nis []fwk.NodeInfo
		for i := range 10 {
			nis = append(nis, w.nodeInfo(fmt.Sprintf("n%03d", i)))
		}
		env := &draEnv{dra: d, features: structured.Features{ConsumableCapacity: true}, byPool: w.byPool, changes: newClaimChanges()}
		full, err := env.allocatedState()
		if err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{}
		s := &steer{}
		m := steeredManager{SharedDRAManager: d, s: s}
		cyc := &steerCycle{policy: api.PlacementBinpack, lazy: lazyOf(pod),
			narrow: &narrowing{env: env, pod: pod, nodes: nis, need: claimNeed{units: 50, bytes: 50}, k: 2, refused: c.refused}}
		s.cur.Store(cyc)
		st, err := m.ResourceClaims().GatherAllocatedState()
		if err != nil || len(st.AggregatedCapacity)+len(st.AllocatedDevices) != 0 {
			t.Fatalf("%s: the state before the slices are listed: not empty (%v)", c.name, err)
		}
		listed, err := m.ResourceSlices().ListWithDeviceTaintRules()
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(cyc.cands.Load().names); got != c.want {
			t.Errorf("%s: candidates %s, want %s", c.name, got, c.want)
		}
		if n := c.listed; n < 0 && len(listed) != len(w.slices) || n >= 0 && len(listed) != n {
			t.Errorf("%s: %d slices listed, want %d", c.name, len(listed), c.listed)
		}
		want := emptyState()
		switch {
		case c.whole:
			want = full
		case len(c.free) > 0:
			want = w.restrict(full, c.want[1:len(c.want)-1])
		}
		if err := sameState(w.restrict(st, "n007"), w.restrict(want, "n007")); err != nil || c.whole && sameState(st, full) != nil {
			t.Errorf("%s: the state handed over: %v", c.name, err)
		}
		if cyc.lazy.partial == c.whole {
			t.Errorf("%s: partial %v", c.name, cyc.lazy.partial)
		}
	}
}

// TestDryRunReadsAlone: a preemption's dry run (a fresh snapshot, no state
// from PreFilter) reads each node's held claims from its pools alone, and
// what they hold is what the whole gathered state's reading gives, with
// allocations in flight and written; past dryNodeReads nodes it gathers
// the whole state once.
func TestDryRunReadsAlone(t *testing.T) {
	for seed := range uint64(4) {
		w := newNomineeWorld(t, rand.New(rand.NewPCG(seed, 34)))
		w.inFlight(t, 11)
		gathered := 0
		env := &draEnv{dra: gatherCounted{worldDRA: worldDRA{SharedDRAManager: w.m, slices: w.slices}, n: &gathered},
			features: structured.Features{ConsumableCapacity: true}, byPool: w.byPool, changes: newClaimChanges()}
		full, err := (&draEnv{dra: w.m}).allocatedState()
		if err != nil {
			t.Fatal(err)
		}
		snap := &draSnapshot{fresh: true}
		for i := range 4 {
			ni := w.nodeInfo(fmt.Sprintf("n%d", i))
			n, err := env.readNode(snap, ni)
			if err != nil {
				t.Fatal(err)
			}
			ref := *n
			ref.held = env.podClaims(ni, n, full)
			got, want := n.state(nil), ref.state(nil)
			if err := sameState(&got, &want); err != nil {
				t.Errorf("seed %d, n%d: held alone: %v", seed, i, err)
			}
		}
		if gathered != 0 {
			t.Errorf("seed %d: %d states gathered for 4 nodes read alone", seed, gathered)
		}
		past := &draSnapshot{fresh: true}
		past.alone.Store(dryNodeReads)
		if _, err := env.readNode(past, w.nodeInfo("n0")); err != nil || gathered != 1 {
			t.Errorf("seed %d: past %d nodes read alone: %d states gathered (%v), want 1", seed, dryNodeReads, gathered, err)
		}
	}
}

// gatherCounted counts the whole states gathered through it.
type gatherCounted struct {
	worldDRA
	n *int
}

func (g gatherCounted) ResourceClaims() fwk.ResourceClaimTracker {
	return countedClaims{ResourceClaimTracker: g.worldDRA.ResourceClaims(), n: g.n} // (drachanges_test.go)
}
