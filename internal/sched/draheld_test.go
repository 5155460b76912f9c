package sched

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// TestDRAPodClaims: node n0's GPU holds the claims of n0-p0 and n0-p1
// (50 units each); n0-p1's pod is gone, its claim not deallocated yet. Read
// from the node's pods with the cycle's allocated state, the node holds
// n0-p0's claim and an unattributed 50 units nothing frees: the state the
// allocator is given, with or without n0-p0 evicted, is the one the index
// of every claim gives, and the victims for 50 units are n0-p0 alone by
// both readings.
func TestDRAPodClaims(t *testing.T) {
	nis, f := fullDRANodes(1, nil)
	ni := framework.NewNodeInfo(nis[0].GetPods()[0].GetPod()) // n0-p1 gone
	ni.SetNode(nis[0].Node())
	env := &draEnv{dra: f, features: structured.Features{ConsumableCapacity: true}}
	full, err := env.readNode(&draSnapshot{}, ni)
	if err != nil {
		t.Fatal(err)
	}
	byPods, err := env.readNode(&draSnapshot{state: state(t, f)}, ni)
	if err != nil {
		t.Fatal(err)
	}
	if len(full.held) != 2 || len(byPods.held) != 2 || byPods.held[0].Name != "n0-p0" || byPods.held[1].Status.ReservedFor != nil {
		t.Fatalf("held: by the index %d claims, by the pods %d (%v); want 2, n0-p0's and one reserved for nobody", len(full.held), len(byPods.held), byPods.held)
	}
	gpu := structured.MakeDeviceID(testDriver, "n0", "gpu-0")
	for _, gone := range []sets.Set[types.UID]{sets.New[types.UID](), sets.New[types.UID]("n0-p0")} {
		a, b := full.state(full.freed(gone)), byPods.state(byPods.freed(gone))
		ua, ub := a.AggregatedCapacity[gpu][capUnits], b.AggregatedCapacity[gpu][capUnits]
		if ua == nil || ub == nil || ua.Cmp(*ub) != 0 {
			t.Errorf("evicting %v: units held %v by the index, %v by the pods", gone.UnsortedList(), ua, ub)
		}
	}
	cands := []alloc.Victim{{UID: "n0-p0"}}
	need := claimNeed{units: 50, bytes: 1 << 30}
	sa, oka := full.cheapestOn(gpu, need, sets.New[types.UID](), cands, nil)
	sb, okb := byPods.cheapestOn(gpu, need, sets.New[types.UID](), cands, nil)
	if !oka || !okb || len(sa.UIDs) != 1 || len(sb.UIDs) != 1 || sb.UIDs[0] != "n0-p0" {
		t.Errorf("victims for 50 units: %v (%v) by the index, %v (%v) by the pods; want n0-p0 by both", sa.UIDs, oka, sb.UIDs, okb)
	}
	if s, ok := byPods.cheapestOn(gpu, claimNeed{units: 60, bytes: 1 << 30}, sets.New[types.UID](), cands, nil); ok && len(s.UIDs) > 0 {
		t.Errorf("victims for 60 units %v: the unattributed 50 units are freed by nobody", s.UIDs)
	}
}

// TestDRADrySnapshotFresh: node n0's GPU (100 units) holds n0-p0's and
// n0-p1's claims (50 units each) when PreFilter reads the allocated state;
// the dry run reads the node after that. Released since (n0-p1's claim
// deallocated, its pod gone or still in the nodes' snapshot) the 50 units
// are free and a 50-unit preemptor needs no victim: PreFilter's state
// would count them held by nobody and evict n0-p0 for them. Not released
// (n0-p1's pod gone, its claim not deallocated yet), or allocated since
// PreFilter read no allocation (in flight, its pod not on the node yet):
// the 50 units are held by nobody and n0-p0 is the victim.
func TestDRADrySnapshotFresh(t *testing.T) {
	for _, c := range []struct {
		name         string
		pre, now     func(*resourceapi.ResourceClaim) // n0-p1's claim at PreFilter, then at the dry run
		p1OnNode     bool
		held         int // claims read for the node
		victimsFor50 []types.UID
	}{
		{"released since PreFilter, pod gone", nil, unallocated, false, 1, nil},
		{"released since PreFilter, pod still listed", nil, unallocated, true, 1, nil},
		{"not released, pod gone", nil, nil, false, 2, []types.UID{"n0-p0"}},
		{"allocated since PreFilter", unallocated, nil, false, 2, []types.UID{"n0-p0"}},
	} {
		nis, f := fullDRANodes(1, nil)
		p1 := f.claims[1]
		if c.pre != nil {
			f.claims[1] = p1.DeepCopy()
			c.pre(f.claims[1])
		}
		cyc := &cycle{draState: state(t, f)} // what PreFilter read
		f.claims[1] = p1.DeepCopy()
		if c.now != nil {
			c.now(f.claims[1])
		}
		ni := nodeWithP1(nis[0], c.p1OnNode)
		env := &draEnv{dra: f, features: structured.Features{ConsumableCapacity: true}}
		cyc.startDryRun() // PostFilter's
		n, err := env.readNode(cyc.draSnap, ni)
		if err != nil {
			t.Fatal(err)
		}
		got := victimsFor50(n)
		if len(n.held) != c.held || !slices.Equal(got, c.victimsFor50) {
			t.Errorf("%s: %d claims held, victims for 50 units %v; want %d, %v", c.name, len(n.held), got, c.held, c.victimsFor50)
		}
	}
}

// unallocated drops a claim's allocation and consumers (deallocated).
func unallocated(c *resourceapi.ResourceClaim) {
	c.Status.Allocation, c.Status.ReservedFor = nil, nil
}

// nodeWithP1 is ni, or (p1OnNode false) ni without its pods after the first.
func nodeWithP1(ni fwk.NodeInfo, p1OnNode bool) fwk.NodeInfo {
	if p1OnNode {
		return ni
	}
	out := framework.NewNodeInfo(ni.GetPods()[0].GetPod())
	out.SetNode(ni.Node())
	return out
}

// victimsFor50 are the cheapest victims for 50 units and 1 GiB on n0's
// gpu-0 among n0-p0.
func victimsFor50(n *draNode) []types.UID {
	gpu := structured.MakeDeviceID(testDriver, "n0", "gpu-0")
	s, _ := n.cheapestOn(gpu, claimNeed{units: 50, bytes: 1 << 30}, sets.New[types.UID](), []alloc.Victim{{UID: "n0-p0"}}, nil)
	var got []types.UID
	for _, u := range s.UIDs {
		got = append(got, types.UID(u))
	}
	return got
}
