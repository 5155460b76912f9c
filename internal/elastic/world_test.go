package elastic

import (
	"testing"
)

// TestPropertyRandomInterleavings: random allocate/free/spill across groups
// with random guarantees, ceilings and spill settings: the card is never
// over-committed, no allocation within a guarantee fails, no bytes are lost.
func TestPropertyRandomInterleavings(t *testing.T) {
	for seed := uint64(1); seed <= 500; seed++ {
		w, set := Interleave(seed, 400)
		if w.Broken != 0 || w.Overcommit != 0 || w.Lost != 0 {
			t.Fatalf("seed %d: guarantees broken %d, over-commit %d, lost %d (settings %+v)", seed, w.Broken,
				w.Overcommit, w.Lost, set)
		}
	}
}

// TestThreeGroupsOnA24GiBCard: the scenario in the model.
func TestThreeGroupsOnA24GiBCard(t *testing.T) {
	for _, spill := range []bool{false, true} {
		set := map[string]Settings{}
		for _, n := range []string{"a", "b", "c"} {
			set[n] = Settings{Min: 6 * gib, Max: 20 * gib, Spill: spill}
		}
		w := NewModel(24*gib, set)
		// a borrows while memory is free.
		for i := range 6 {
			if !w.Allocate("a", 2*gib) {
				t.Fatalf("spill=%v: a's allocation %d refused", spill, i)
			}
		}
		ok := w.Allocate("a", 2*gib) // 14 GiB: guarantees of b and c need the rest
		if ok != spill {
			t.Fatalf("spill=%v: a's borrow past 12 GiB: ok=%v", spill, ok)
		}
		// b and c fill their guarantees: never refused.
		for _, g := range []string{"b", "c"} {
			for range 3 {
				if !w.Allocate(g, 2*gib) {
					t.Fatalf("spill=%v: %s refused within its guarantee", spill, g)
				}
			}
		}
		if w.Broken != 0 || w.Overcommit != 0 || w.dev > 24*gib {
			t.Fatalf("spill=%v: broken %d over-commit %d dev %d", spill, w.Broken, w.Overcommit, w.dev)
		}
		if spill && w.Spilled == 0 {
			t.Fatal("spill: nothing was spilled")
		}
	}
}

// TestBurstyElasticUsesMore: four bursty tenants hold more of the card with
// elastic memory than with static caps, and no guarantee breaks.
func TestBurstyElasticUsesMore(t *testing.T) {
	st := Bursty(1, 4, 24*gib, 20*gib, 2000, false)
	el := Bursty(1, 4, 24*gib, 20*gib, 2000, true)
	t.Logf("memory in use: elastic %.1f%% (served %.1f%%) vs static %.1f%% (served %.1f%%)",
		el.InUse*100, el.Served*100, st.InUse*100, st.Served*100)
	if el.InUse <= st.InUse || el.Served <= st.Served {
		t.Fatalf("elastic %+v not above static %+v", el, st)
	}
	for _, r := range []BurstyResult{st, el} {
		if r.Model.Broken != 0 || r.Model.Overcommit != 0 || r.Model.Lost != 0 {
			t.Fatalf("outcome %+v", r.Model)
		}
	}
}
