package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
		lp := env.table.ledger[poolOnly(structured.MakeDeviceID(testDriver, pool, "x"))]
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
	netSlice := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: otherDriver, AllNodes: ptr.To(true),
		Pool: resourceapi.ResourcePool{Name: "net"}, Devices: []resourceapi.Device{{Name: "nic"}}}}
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
