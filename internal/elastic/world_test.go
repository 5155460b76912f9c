package elastic

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// world is a model of one GPU, the libraries of its groups and the daemon's
// use of the ledger: the library allocates up to its allowance alone, borrows
// past it, makes borrowed allocations managed when its group spills, asks for
// a reclaim when the card has no room for an allocation within its guarantee,
// and spills its managed allocations on the daemon's order.
type world struct {
	l     *Ledger
	now   time.Time
	total uint64
	dev   uint64 // bytes on the card
	host  uint64 // bytes spilled to host memory
	set   map[string]Settings
	alloc map[string][]*walloc
	seq   uint64
	// outcomes
	broken, overcommit, lost, refused, granted, spilled int
	debug                                               *testing.T
}

type walloc struct {
	size    uint64
	managed bool
	host    uint64 // bytes of it moved to host memory (a prefix: prefetch works on any page range)
	tag     uint64 // the data written: read back after any spill
	check   uint64
}

func newWorld(total uint64, set map[string]Settings) *world {
	w := &world{l: NewLedger(Config{Reserve: 0, Hold: time.Second}, total), now: t0, total: total,
		set: set, alloc: map[string][]*walloc{}}
	for n, s := range set {
		w.l.Set(n, s)
		w.l.Observe(n, Usage{})
	}
	return w
}

func (w *world) usage(g string) Usage {
	var u Usage
	for _, a := range w.alloc[g] {
		u.Used += a.size
		if a.managed {
			u.Managed += a.size
		}
		u.Spilled += a.host
	}
	return u
}

// observe is the daemon reading the group's state file.
func (w *world) observe(g string) { w.l.Observe(g, w.usage(g)) }

// spill is the library's answer to an order: the device part of managed
// allocations, oldest first, never taking the group below its guarantee.
func (w *world) spill(g string, bytes uint64) {
	u := w.usage(g)
	bytes = min(bytes, sub(u.Used-u.Spilled, w.set[g].Min))
	for _, a := range w.alloc[g] {
		if bytes == 0 {
			break
		}
		if a.managed && a.host < a.size {
			n := min(bytes, a.size-a.host)
			a.host += n
			w.dev -= n
			w.host += n
			bytes -= n
			w.spilled++
		}
	}
	w.observe(g)
}

// allocate follows the library; it returns whether the allocation succeeded.
func (w *world) allocate(g string, size uint64) bool {
	s := w.set[g]
	u := w.usage(g)
	used := u.Used
	within := u.Used-u.Spilled+size <= s.Min // on the device, within the guarantee
	if used+size > w.l.Allowance(g) {
		d := w.l.Borrow(g, size, w.now)
		if d.Refused != "" {
			w.refused++
			return false
		}
		w.granted++
	}
	if w.dev+size > w.total && within {
		p := w.l.Reclaim(g, size, w.now)
		for _, o := range p.Spill {
			w.spill(o.Group, o.Bytes)
		}
	}
	if w.dev+size > w.total {
		w.l.Settle(g)
		if within {
			w.broken++
			if w.debug != nil {
				w.debug.Logf("broken: %s size %d used %d dev %d snapshot %+v", g, size, used, w.dev, w.l.Snapshot())
			}
		}
		return false
	}
	w.l.Settle(g)
	w.seq++
	a := &walloc{size: size, managed: s.Spill && used+size > s.Min, tag: w.seq, check: w.seq * 2654435761}
	w.alloc[g] = append(w.alloc[g], a)
	w.dev += size
	if w.dev > w.total {
		w.overcommit++
	}
	w.observe(g)
	return true
}

func (w *world) free(g string, i int) {
	a := w.alloc[g][i]
	if a.check != a.tag*2654435761 {
		w.lost++
	}
	w.host -= a.host
	w.dev -= a.size - a.host
	w.alloc[g] = slices.Delete(w.alloc[g], i, i+1)
	w.observe(g)
}

// TestPropertyRandomInterleavings: random allocate/free/spill across groups
// with random guarantees, ceilings and spill settings: the card is never
// over-committed, no allocation within a guarantee fails, no bytes are lost.
func TestPropertyRandomInterleavings(t *testing.T) {
	const total = 24 * gib
	for seed := uint64(1); seed <= 500; seed++ {
		r := rand.New(rand.NewPCG(seed, 15))
		set := map[string]Settings{}
		var mins uint64
		for i := range 2 + r.IntN(4) {
			m := uint64(r.IntN(8)+1) * gib
			if mins+m > total {
				break
			}
			mins += m
			set[fmt.Sprint("g", i)] = Settings{Min: m, Max: m + uint64(r.IntN(20))*gib, Spill: r.IntN(2) == 0}
		}
		w := newWorld(total, set)
		w.debug = t
		names := make([]string, 0, len(set))
		for n := range set {
			names = append(names, n)
		}
		slices.Sort(names)
		for range 400 {
			g := names[r.IntN(len(names))]
			w.now = w.now.Add(time.Duration(r.IntN(400)) * time.Millisecond)
			switch op := r.IntN(10); {
			case op < 6:
				w.allocate(g, uint64(r.IntN(4096)+1)<<20)
			case op < 9 && len(w.alloc[g]) > 0:
				w.free(g, r.IntN(len(w.alloc[g])))
			default:
				w.spill(g, uint64(r.IntN(4))*gib) // the library may be asked at any time
			}
			var dev, host uint64
			for _, n := range names {
				for _, a := range w.alloc[n] {
					host += a.host
					dev += a.size - a.host
				}
			}
			if dev != w.dev || host != w.host {
				w.lost++
			}
		}
		if w.broken != 0 || w.overcommit != 0 || w.lost != 0 {
			t.Fatalf("seed %d: guarantees broken %d, over-commit %d, lost %d (settings %+v)", seed, w.broken,
				w.overcommit, w.lost, set)
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
		w := newWorld(24*gib, set)
		// a borrows while memory is free.
		for i := range 6 {
			if !w.allocate("a", 2*gib) {
				t.Fatalf("spill=%v: a's allocation %d refused", spill, i)
			}
		}
		ok := w.allocate("a", 2*gib) // 14 GiB: guarantees of b and c need the rest
		if ok != spill {
			t.Fatalf("spill=%v: a's borrow past 12 GiB: ok=%v", spill, ok)
		}
		// b and c fill their guarantees: never refused.
		for _, g := range []string{"b", "c"} {
			for range 3 {
				if !w.allocate(g, 2*gib) {
					t.Fatalf("spill=%v: %s refused within its guarantee", spill, g)
				}
			}
		}
		if w.broken != 0 || w.overcommit != 0 || w.dev > 24*gib {
			t.Fatalf("spill=%v: broken %d over-commit %d dev %d", spill, w.broken, w.overcommit, w.dev)
		}
		if spill && w.spilled == 0 {
			t.Fatal("spill: nothing was spilled")
		}
	}
}
