package elastic

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Model is a model of one GPU, the libraries of its groups and the daemon's
// use of the ledger: the library allocates up to its allowance alone, borrows
// past it, makes borrowed allocations managed when its group spills, asks for
// a reclaim when the card has no room for an allocation within its guarantee,
// and spills its managed allocations on the daemon's order. For the property
// test and the utilisation figure of make bench-elastic; it checks, on every
// step, that the card is never over-committed (Overcommit), that no
// allocation within a guarantee fails (Broken) and that no allocation's bytes
// are lost across spills (Lost).
type Model struct {
	l     *Ledger
	now   time.Time
	total uint64
	dev   uint64 // bytes on the card
	host  uint64 // bytes spilled to host memory
	set   map[string]Settings
	alloc map[string][]*walloc
	seq   uint64
	// outcomes
	Broken, Overcommit, Lost, Refused, Granted, Spilled int
	Debug                                               func(format string, args ...any)
}

type walloc struct {
	size    uint64
	managed bool
	host    uint64 // bytes of it moved to host memory (a prefix: prefetch works on any page range)
	tag     uint64 // the data written: read back after any spill
	check   uint64
}

// NewModel is a card of total bytes shared by groups with these settings.
func NewModel(total uint64, set map[string]Settings) *Model {
	w := &Model{l: NewLedger(Config{Reserve: 0, Hold: time.Second}, total), now: time.Unix(0, 0), total: total,
		set: set, alloc: map[string][]*walloc{}}
	for n, s := range set {
		w.l.Set(n, s)
		w.l.Observe(n, Usage{})
	}
	return w
}

// Usage is what group g's state file would say.
func (w *Model) Usage(g string) Usage {
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
func (w *Model) observe(g string) { w.l.Observe(g, w.Usage(g)) }

// Spill is the library's answer to an order: the device part of managed
// allocations, oldest first, never taking the group below its guarantee.
func (w *Model) Spill(g string, bytes uint64) {
	u := w.Usage(g)
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
			w.Spilled++
		}
	}
	w.observe(g)
}

// Allocate follows the library; it returns whether the allocation succeeded.
func (w *Model) Allocate(g string, size uint64) bool {
	s := w.set[g]
	u := w.Usage(g)
	used := u.Used
	within := u.Used-u.Spilled+size <= s.Min // on the device, within the guarantee
	if used+size > w.l.Allowance(g) {
		d := w.l.Borrow(g, size, w.now)
		if d.Refused != "" {
			w.Refused++
			return false
		}
		w.Granted++
	}
	if w.dev+size > w.total && within {
		p := w.l.Reclaim(g, size, w.now)
		for _, o := range p.Spill {
			w.Spill(o.Group, o.Bytes)
		}
	}
	if w.dev+size > w.total {
		w.l.Settle(g)
		if within {
			w.Broken++
			if w.Debug != nil {
				w.Debug("broken: %s size %d used %d dev %d snapshot %+v", g, size, used, w.dev, w.l.Snapshot())
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
		w.Overcommit++
	}
	w.observe(g)
	return true
}

// Free frees g's i-th allocation (checking its bytes are intact).
func (w *Model) Free(g string, i int) {
	a := w.alloc[g][i]
	if a.check != a.tag*2654435761 {
		w.Lost++
	}
	w.host -= a.host
	w.dev -= a.size - a.host
	w.alloc[g] = slices.Delete(w.alloc[g], i, i+1)
	w.observe(g)
}

// Allocations is how many allocations g holds.
func (w *Model) Allocations(g string) int { return len(w.alloc[g]) }

// Device is the bytes on the card.
func (w *Model) Device() uint64 { return w.dev }

// Advance moves the model's clock.
func (w *Model) Advance(d time.Duration) { w.now = w.now.Add(d) }

// Interleave runs ops random operations (allocate, free, spill orders) of
// 2-5 groups with random guarantees, ceilings and spill settings on a 24 GiB
// card, with random time between them; the model's counters say what broke.
func Interleave(seed uint64, ops int) (*Model, map[string]Settings) {
	const total = 24 << 30
	r := rand.New(rand.NewPCG(seed, 15))
	set := map[string]Settings{}
	var mins uint64
	for i := range 2 + r.IntN(4) {
		m := uint64(r.IntN(8)+1) << 30
		if mins+m > total {
			break
		}
		mins += m
		set[fmt.Sprint("g", i)] = Settings{Min: m, Max: m + uint64(r.IntN(20))<<30, Spill: r.IntN(2) == 0}
	}
	w := NewModel(total, set)
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	slices.Sort(names)
	for range ops {
		g := names[r.IntN(len(names))]
		w.Advance(time.Duration(r.IntN(400)) * time.Millisecond)
		switch op := r.IntN(10); {
		case op < 6:
			w.Allocate(g, uint64(r.IntN(4096)+1)<<20)
		case op < 9 && len(w.alloc[g]) > 0:
			w.Free(g, r.IntN(len(w.alloc[g])))
		default:
			w.Spill(g, uint64(r.IntN(4))<<30) // the library may be asked at any time
		}
		var dev, host uint64
		for _, n := range names {
			for _, a := range w.alloc[n] {
				host += a.host
				dev += a.size - a.host
			}
		}
		if dev != w.dev || host != w.host {
			w.Lost++
		}
	}
	return w, set
}
