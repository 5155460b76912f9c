package sched

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
)

// TestClaimChanges: the informer's events number the changes of claim
// allocations per pool; a pool changed after the number read counts, one
// changed before or another pool's does not, an object that is not a
// claim changes every pool, an update that neither allocates nor
// deallocates changes nothing, and a nil claimChanges knows nothing.
func TestClaimChanges(t *testing.T) {
	_, f := fullDRANodes(2, nil)
	on0, on1 := f.claims[0], f.claims[2] // allocated on n0's pool, n1's
	pool0 := sets.New(poolKey(testDriver, "n0"))
	free := on0.DeepCopy()
	unallocated(free)
	relabelled := on0.DeepCopy()
	relabelled.Labels = map[string]string{"a": "b"}
	for _, c := range []struct {
		name   string
		events func(h cache.ResourceEventHandler)
		want   bool // n0's pool changed after the number read
	}{
		{"nothing", func(cache.ResourceEventHandler) {}, false},
		{"allocated on n0", func(h cache.ResourceEventHandler) { h.OnUpdate(free, on0) }, true},
		{"deallocated on n0", func(h cache.ResourceEventHandler) { h.OnUpdate(on0, free) }, true},
		{"deleted allocated on n0", func(h cache.ResourceEventHandler) { h.OnDelete(on0) }, true},
		{"tombstone of n0's", func(h cache.ResourceEventHandler) { h.OnDelete(cache.DeletedFinalStateUnknown{Obj: on0}) }, true},
		{"added allocated on n0", func(h cache.ResourceEventHandler) { h.OnAdd(on0, false) }, true},
		{"added unallocated", func(h cache.ResourceEventHandler) { h.OnAdd(free, false) }, false},
		{"deleted unallocated", func(h cache.ResourceEventHandler) { h.OnDelete(free) }, false},
		{"labels of n0's", func(h cache.ResourceEventHandler) { h.OnUpdate(on0, relabelled) }, false},
		{"allocated on n1", func(h cache.ResourceEventHandler) { h.OnAdd(on1, false) }, false},
		{"not a claim", func(h cache.ResourceEventHandler) { h.OnDelete("x") }, true},
	} {
		ch := newClaimChanges()
		h := ch.handler()
		h.OnAdd(on0, true) // before the number read: in the state
		seq := ch.now()
		c.events(h)
		if got := ch.since(pool0, seq); got != c.want {
			t.Errorf("%s: n0 changed since %v, want %v", c.name, got, c.want)
		}
		var keys []string
		now, all := ch.changedSince(seq, func(k string) { keys = append(keys, k) })
		if got := all || slices.Contains(keys, poolKey(testDriver, "n0")); got != c.want || now != ch.now() {
			t.Errorf("%s: n0 listed changed since (%v, every pool %v), now %d; want %v, %d", c.name, keys, all, now, c.want, ch.now())
		}
	}
	var none *claimChanges
	none.touch(on0)
	if none.now() != 0 || !none.since(pool0, 0) {
		t.Errorf("nil claimChanges: now %d, since %v; want 0, true", none.now(), none.since(pool0, 0))
	}
}

// TestClaimChangesLog: a reader following the changes (changedSince) is
// given each pool changed after its number, in order, until the log
// drops changes it has not read: then every pool counts as changed.
func TestClaimChangesLog(t *testing.T) {
	_, f := fullDRANodes(2, nil)
	on0, on1 := f.claims[0], f.claims[2]
	ch := newClaimChanges()
	ch.touch(on0)
	seq := ch.now()
	ch.touch(on1)
	ch.touch(on0)
	var keys []string
	if now, all := ch.changedSince(seq, func(k string) { keys = append(keys, k) }); all || now != seq+2 ||
		!slices.Equal(keys, []string{poolKey(testDriver, "n1"), poolKey(testDriver, "n0")}) {
		t.Errorf("changed since %d: %v, every pool %v, now %d; want n1, n0 and %d", seq, keys, all, now, seq+2)
	}
	old := ch.now()
	for range logCap + 1 {
		ch.touch(on1)
	}
	if _, all := ch.changedSince(old, func(string) {}); !all {
		t.Errorf("a reader behind the log's dropped changes: not every pool changed")
	}
	if len(ch.log) > logCap {
		t.Errorf("log of %d changes, want at most %d", len(ch.log), logCap)
	}
	recent := ch.now()
	ch.touch(on0)
	keys = keys[:0]
	if _, all := ch.changedSince(recent, func(k string) { keys = append(keys, k) }); all || !slices.Equal(keys, []string{poolKey(testDriver, "n0")}) {
		t.Errorf("changed since the last number: %v, every pool %v; want n0 alone", keys, all)
	}
	var none *claimChanges
	if _, all := none.changedSince(0, func(string) {}); !all {
		t.Errorf("nil claimChanges: not every pool changed")
	}
}

// countedClaims counts the allocated states gathered from a tracker.
type countedClaims struct {
	fwk.ResourceClaimTracker
	n *int
}

func (c countedClaims) GatherAllocatedState() (*structured.AllocatedState, error) {
	*c.n++
	return c.ResourceClaimTracker.GatherAllocatedState()
}

type countedDRA struct {
	*fakeDRA
	n int
}

func (d *countedDRA) ResourceClaims() fwk.ResourceClaimTracker {
	return countedClaims{ResourceClaimTracker: fakeClaims{c: d.claims}, n: &d.n}
}

// TestDRADryStateReused: as TestDRADrySnapshotFresh (node n0's GPU, 100
// units, holds n0-p0's and n0-p1's claims of 50 when PreFilter gathers
// the allocated state), with the claim informer's changes known. Nothing
// changed on n0's pool since (or only on n1's): the dry run reads n0 with
// PreFilter's state, gathers none, and evicts n0-p0 for 50 units. n0-p1's
// claim released since (the informer's event seen or not yet: n0's pods'
// claims then hold less than that state), or allocated since (seen; or
// not seen but n0-p1 is on the node and its claim not in that state): one
// state gathered, and the victims as TestDRADrySnapshotFresh's.
func TestDRADryStateReused(t *testing.T) {
	for _, c := range []struct {
		name         string
		pre, now     func(*resourceapi.ResourceClaim) // n0-p1's claim at PreFilter, then at the dry run
		seen         bool                             // the informer delivered the change before the dry run
		p1OnNode     bool
		gathered     int
		held         int
		victimsFor50 []types.UID
	}{
		{"nothing changed", nil, nil, false, true, 0, 2, []types.UID{"n0-p0"}},
		{"nothing changed, n0-p1 gone", nil, nil, false, false, 1, 2, []types.UID{"n0-p0"}}, // (held by nobody: asked again)
		{"released since PreFilter, seen", nil, unallocated, true, true, 1, 1, nil},
		{"released since PreFilter, not seen yet", nil, unallocated, false, true, 1, 1, nil},
		{"released since PreFilter, not seen, pod gone", nil, unallocated, false, false, 1, 1, nil},
		{"allocated since PreFilter, seen", unallocated, nil, true, false, 1, 2, []types.UID{"n0-p0"}},
		{"allocated since PreFilter, not seen, pod on the node", unallocated, nil, false, true, 1, 2, []types.UID{"n0-p0"}},
	} {
		nis, f := fullDRANodes(2, nil)
		p1 := f.claims[1]
		if c.pre != nil {
			f.claims[1] = p1.DeepCopy()
			c.pre(f.claims[1])
		}
		env := &draEnv{features: structured.Features{ConsumableCapacity: true}, changes: newClaimChanges()}
		h := env.changes.handler()
		for _, cl := range f.claims {
			h.OnAdd(cl, true)
		}
		pre := &steerData{seq: env.changes.now(), state: state(t, f)} // what PreFilter read
		was := f.claims[1]
		f.claims[1] = p1.DeepCopy()
		if c.now != nil {
			c.now(f.claims[1])
		}
		if c.seen {
			h.OnUpdate(was, f.claims[1])
		}
		h.OnAdd(f.claims[2], false) // n1's pool changes in any case
		d := &countedDRA{fakeDRA: f}
		env.dra = d
		ni := nodeWithP1(nis[0], c.p1OnNode)
		cyc := &cycle{}
		cyc.startDryRun()
		cyc.draSnap.fromPreFilter(pre)
		n, err := env.readNode(cyc.draSnap, ni)
		if err != nil {
			t.Fatal(err)
		}
		got := victimsFor50(n)
		if d.n != c.gathered || len(n.held) != c.held || !slices.Equal(got, c.victimsFor50) {
			t.Errorf("%s: %d states gathered, %d claims held, victims for 50 units %v; want %d, %d, %v",
				c.name, d.n, len(n.held), got, c.gathered, c.held, c.victimsFor50)
		}
	}
}

// readsCounted counts the claims read from the tracker.
type readsCounted struct {
	countedClaims
	gets *int
}

func (c readsCounted) Get(ns, name string) (*resourceapi.ResourceClaim, error) {
	*c.gets++
	return c.countedClaims.Get(ns, name)
}

type readsDRA struct {
	*countedDRA
	gets int
}

func (d *readsDRA) ResourceClaims() fwk.ResourceClaimTracker {
	return readsCounted{countedClaims: d.countedDRA.ResourceClaims().(countedClaims), gets: &d.gets}
}

// TestDRAReadNodeOnce: the shortlist and the dry run read a node from one
// snapshot: its pods' claims are read from the tracker once (two pods, two
// claims), and each read is a copy: a device one caller leaves out
// (withoutBusy) is still in the next read.
func TestDRAReadNodeOnce(t *testing.T) {
	nis, f := fullDRANodes(1, nil)
	d := &readsDRA{countedDRA: &countedDRA{fakeDRA: f}}
	env := &draEnv{dra: d, features: structured.Features{ConsumableCapacity: true}}
	cyc := &cycle{}
	cyc.startDryRun()
	first, err := env.readNode(cyc.draSnap, nis[0])
	if err != nil {
		t.Fatal(err)
	}
	gpu := structured.MakeDeviceID(testDriver, "n0", "gpu-0")
	delete(first.devices, gpu)
	second, err := env.readNode(cyc.draSnap, nis[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := second.devices[gpu]; d.gets != 2 || !ok || len(second.held) != 2 {
		t.Errorf("claims read %d times, gpu-0 in the second read %v, %d claims held; want 2, true, 2", d.gets, ok, len(second.held))
	}
}
