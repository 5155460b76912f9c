// Package elastic is the time-slice daemon's pure grant and reclaim logic for elastic
// GPU memory: per GPU, every group has a guarantee (memory.min) and a ceiling
// (memory.max). A group allocates up to its guarantee plus what it was lent
// without asking; past that it asks for a borrow, granted only from memory no
// other group's unmet guarantee needs (spillable borrows excepted: they can be
// moved to host memory when a guarantee needs the room back).
//
// No clocks, no I/O: the caller passes the time and the usage it read.
package elastic

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gpuslice/gpuslice/internal/units"
)

// Config are the ledger's tunables.
type Config struct {
	// Reserve is kept free on every GPU for what no group accounts for
	// (contexts, other processes).
	Reserve uint64
	// Hold keeps lent bytes a group has not allocated yet lent this long after
	// the grant (the library allocates right after it), then they go back.
	Hold time.Duration
	// ReclaimWait is how long an allocation within a guarantee waits for
	// borrowers to give memory back before it fails.
	ReclaimWait time.Duration
}

// DefaultConfig is the daemon's default.
func DefaultConfig() Config {
	return Config{Reserve: 256 << 20, Hold: time.Second, ReclaimWait: 5 * time.Second}
}

// Settings of one group on a GPU. Max < Min counts as Max = Min.
type Settings struct {
	Min, Max uint64
	Spill    bool // borrowed allocations are managed memory that may move to the host
}

// Usage is what a group's state file says it holds on a GPU: every byte it
// allocated (Used), of which Managed are spillable (allocated as managed
// memory past its guarantee) and Spilled now lie in host memory.
type Usage struct {
	Used, Managed, Spilled uint64
}

type entry struct {
	set       Settings
	use       Usage
	lent      uint64 // allowance past Min
	lastGrant time.Time
}

type pending struct {
	group string
	bytes uint64
	until time.Time
}

// Ledger is one GPU's book. Not safe for concurrent use.
type Ledger struct {
	cfg     Config
	total   uint64
	other   uint64
	device  uint64 // used bytes the driver reported (deviceSeen)
	seen    bool
	groups  map[string]*entry
	pending []pending
}

// NewLedger returns the book of a GPU of total bytes.
func NewLedger(cfg Config, total uint64) *Ledger {
	return &Ledger{cfg: cfg, total: total, groups: map[string]*entry{}}
}

func (l *Ledger) get(name string) *entry {
	e := l.groups[name]
	if e == nil {
		e = &entry{}
		l.groups[name] = e
	}
	return e
}

// Set records a group's settings (the group starts counting for guarantees).
func (l *Ledger) Set(name string, s Settings) {
	if s.Max < s.Min {
		s.Max = s.Min
	}
	l.get(name).set = s
}

// Observe records a group's usage as read from its state file.
func (l *Ledger) Observe(name string, u Usage) {
	u.Managed = min(u.Managed, u.Used)
	u.Spilled = min(u.Spilled, u.Managed)
	e := l.get(name)
	e.use = u
	e.lent = max(e.lent, sub(u.Used, e.set.Min)) // what it holds past Min was lent (a restarted daemon relearns it)
}

// ObserveDevice records the device's used bytes as the driver reports them:
// what the groups do not account for is someone else's.
func (l *Ledger) ObserveDevice(used uint64) {
	l.device, l.seen = used, true
	var held uint64
	for _, e := range l.groups {
		held += e.use.Used - e.use.Spilled
	}
	l.other = sub(used, held)
}

// Forget drops a group (its last process is gone and it holds nothing).
func (l *Ledger) Forget(name string) { delete(l.groups, name) }

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// slack is lent memory the group has not allocated yet: it counts as used.
func (e *entry) slack() uint64 {
	return sub(e.set.Min+e.lent, max(e.use.Used, e.set.Min))
}

func (e *entry) device() uint64 { return e.use.Used - e.use.Spilled }

// spillable is the group's managed memory on the device that may move to
// the host without taking the group below its guarantee.
func (e *entry) spillable() uint64 {
	return min(e.use.Managed-e.use.Spilled, sub(e.device(), e.set.Min))
}

// footprint is what the group holds on the device that cannot be taken
// back: its whole guarantee, or more if it holds more than that in memory
// that cannot spill (lent bytes not allocated yet included, unless they
// will be managed memory).
func (e *entry) footprint() uint64 {
	f := max(e.set.Min, e.device()-(e.use.Managed-e.use.Spilled))
	if !e.set.Spill {
		f += e.slack()
	}
	return f
}

// DeviceFree is what the driver last said is free (the book's Free if it
// never said): allocations reserved in a state file but not made yet count in
// the book, not on the device.
func (l *Ledger) DeviceFree() uint64 {
	if !l.seen {
		return l.Free()
	}
	return sub(l.total, l.device)
}

// Free is the device memory no one holds or was lent, by the book.
func (l *Ledger) Free() uint64 {
	used := l.other
	for _, e := range l.groups {
		used += e.device() + e.slack()
	}
	return sub(l.total, used)
}

// committed is what the device must keep for footprints, the reserve and
// reclaims in progress (except name's), name's own footprint left out.
func (l *Ledger) committed(name string, now time.Time) uint64 {
	c := l.other + l.cfg.Reserve + l.pendingFor(name, now)
	for n, e := range l.groups {
		if n != name {
			c += e.footprint()
		}
	}
	return c
}

func (l *Ledger) pendingFor(except string, now time.Time) uint64 {
	var n uint64
	for _, p := range l.pending {
		if p.group != except && now.Before(p.until) {
			n += p.bytes
		}
	}
	return n
}

// Allowance is what the group may hold without asking: Min plus what it was lent.
func (l *Ledger) Allowance(name string) uint64 {
	e := l.groups[name]
	if e == nil {
		return 0
	}
	return e.set.Min + e.lent
}

// Decision answers a borrow.
type Decision struct {
	Granted   uint64 // bytes added to the allowance (0: refused)
	Allowance uint64 // the group's allowance after the decision
	Refused   string // one line, when refused
}

// room is how much more name could put on the device now: physically free
// memory (less the reserve and others' reclaims), and unless its new
// allocations spill, no more than leaves every other group's guarantee
// and unspillable memory in place.
func (l *Ledger) room(name string, e *entry, now time.Time) (room, free, kept uint64) {
	free = l.Free()
	room = sub(free, l.cfg.Reserve+l.pendingFor(name, now))
	if e.set.Spill {
		return room, free, 0
	}
	kept = l.committed(name, now)
	own := sub(e.set.Min, e.device()-(e.use.Managed-e.use.Spilled)) // free of footprint growth
	commit := sub(l.total, kept+e.footprint()-own)
	return min(room, commit), free, kept
}

// Borrow decides whether name may allocate size more bytes past its allowance.
func (l *Ledger) Borrow(name string, size uint64, now time.Time) Decision {
	l.Tick(now)
	e := l.get(name)
	allow := e.set.Min + e.lent
	if e.use.Used+size <= allow {
		return Decision{Allowance: allow} // fits already (lent to another member meanwhile)
	}
	if e.use.Used+size > e.set.Max || e.use.Used+size < size {
		return Decision{Allowance: allow, Refused: fmt.Sprintf("past the ceiling: holds %s, memory.max %s",
			units.FormatSize(e.use.Used), units.FormatSize(e.set.Max))}
	}
	if room, free, kept := l.room(name, e, now); size > room {
		why := fmt.Sprintf("%s free on the GPU, %s kept for guarantees and reserve",
			units.FormatSize(free), units.FormatSize(max(kept, l.cfg.Reserve)))
		return Decision{Allowance: allow, Refused: why}
	}
	need := e.use.Used + size - allow
	e.lent += need
	e.lastGrant = now
	return Decision{Granted: need, Allowance: allow + need}
}

// Order asks a group to move bytes of its borrowed memory to the host.
type Order struct {
	Group string
	Bytes uint64
}

// Plan answers a reclaim.
type Plan struct {
	Spill []Order // ask these groups to spill
	// Short is what spilling cannot cover: the caller waits for borrowers
	// to free it (up to Config.ReclaimWait).
	Short uint64
}

// Reclaim is called when an allocation of size bytes within name's guarantee
// found no room on the device. New borrows stop seeing that room for Hold;
// spillable borrowers are asked to give back what is missing.
func (l *Ledger) Reclaim(name string, size uint64, now time.Time) Plan {
	l.Tick(now)
	l.pending = append(l.pending, pending{group: name, bytes: size, until: now.Add(l.cfg.Hold)})
	short := sub(size, l.DeviceFree())
	if short == 0 {
		short = size // the driver refused what the book thinks is free: someone else's
	}
	names := make([]string, 0, len(l.groups))
	for n, e := range l.groups {
		if n != name && e.spillable() > 0 {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(l.groups[b].spillable(), l.groups[a].spillable()), cmp.Compare(a, b))
	})
	var p Plan
	for _, n := range names {
		if short == 0 {
			break
		}
		take := min(short, l.groups[n].spillable())
		p.Spill = append(p.Spill, Order{Group: n, Bytes: take})
		short -= take
	}
	p.Short = short
	return p
}

// Settle drops name's reclaim reservations (its allocation went through or gave up).
func (l *Ledger) Settle(name string) {
	l.pending = slices.DeleteFunc(l.pending, func(p pending) bool { return p.group == name })
}

// Tick gives back lent bytes not allocated within Hold of the last grant and
// drops expired reclaim reservations.
func (l *Ledger) Tick(now time.Time) {
	for _, e := range l.groups {
		if now.Sub(e.lastGrant) >= l.cfg.Hold {
			e.lent = min(e.lent, sub(e.use.Used, e.set.Min))
		}
	}
	l.pending = slices.DeleteFunc(l.pending, func(p pending) bool { return !now.Before(p.until) })
}

// GroupState is one group's line in the book.
type GroupState struct {
	Name                 string
	Min, Max             uint64
	Spill                bool
	Used, Spilled, Lent  uint64
	Borrowed, Guaranteed uint64 // device bytes past Min, and up to Min
}

// Snapshot lists the groups, by name.
func (l *Ledger) Snapshot() []GroupState {
	out := make([]GroupState, 0, len(l.groups))
	for n, e := range l.groups {
		dev := e.device()
		out = append(out, GroupState{Name: n, Min: e.set.Min, Max: e.set.Max, Spill: e.set.Spill,
			Used: e.use.Used, Spilled: e.use.Spilled, Lent: e.lent,
			Borrowed: sub(dev, e.set.Min), Guaranteed: min(dev, e.set.Min)})
	}
	slices.SortFunc(out, func(a, b GroupState) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Available is what name could hold now: what it holds plus what it
// could still put on the device, between its guarantee and its ceiling (for
// cuMemGetInfo inside the group).
func (l *Ledger) Available(name string, now time.Time) uint64 {
	l.Tick(now)
	e := l.groups[name]
	if e == nil {
		return 0
	}
	room, _, _ := l.room(name, e, now)
	return max(e.set.Min, min(e.set.Max, e.use.Used+e.slack()+room))
}
