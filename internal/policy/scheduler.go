package policy

import (
	"fmt"
	"time"
)

// ID names a tenant (the time-slice daemon uses one per process group).
type ID uint64

// Grant is the right to launch work on the GPU from Start until End. Time past
// SliceEnd is borrowed from the tenant's burst buffer.
type Grant struct {
	Tenant   ID
	Seq      uint64 // unique per scheduler, increasing
	Start    time.Time
	SliceEnd time.Time
	End      time.Time
	// Preempt marks an online tenant's turn pulled ahead of offline work.
	Preempt bool
	// Alone: no other tenant waited when the grant was made or last renewed
	// (and renewal is on). An idle holder need not hand back; the policy
	// says so (ActRenew, Alone false) as soon as another tenant waits.
	Alone bool
}

// ActionKind says what the caller must tell a tenant.
type ActionKind uint8

// The actions.
const (
	// ActGrant: the tenant now holds the GPU (Action.Grant).
	ActGrant ActionKind = iota + 1
	// ActRevoke: the holder must finish its outstanding work and hand over now.
	ActRevoke
	// ActExpire: the holder did not hand over in time; its grant is void.
	ActExpire
	// ActRenew: the holder's grant (same Seq) changed: renewed (a later End,
	// Alone) because no other tenant waits, or no longer Alone because one
	// now does.
	ActRenew
)

func (k ActionKind) String() string {
	switch k {
	case ActGrant:
		return "grant"
	case ActRevoke:
		return "revoke"
	case ActExpire:
		return "expire"
	case ActRenew:
		return "renew"
	}
	return fmt.Sprintf("action(%d)", uint8(k))
}

// Action is one decision for the caller to carry out, in order.
type Action struct {
	Kind   ActionKind
	Tenant ID
	Grant  Grant // the grant concerned (new for ActGrant, current for the others)
	// Again (ActExpire): the tenant keeps its place in line; whoever held
	// the void grant waits for its next turn.
	Again bool
}

type tenant struct {
	id       ID
	params   Params
	bank     bank
	debt     time.Duration // overrun not covered by the bank, repaid from later slices
	waiting  bool          // has work and wants the GPU
	expired  bool          // its last grant expired and it has not released or asked since
	forfeit  bool          // took its turn early (preempt); skip one regular turn
	achieved time.Duration // total time held
	grants   uint64
	renewals uint64
	passed   uint64   // turns passed while it had no work
	overrun  overruns // hand-overs after a revoke: how long past it
	ceil     ceiling  // budget under Params.ShareMax
}

type hold struct {
	t       *tenant
	g       Grant
	revoked bool
	hardEnd time.Time // when revoked: the GPU is taken away at this time
	noRenew bool      // Queued: the holder's next turn is a new grant
	renewed bool      // renewed at least once
}

// Scheduler is the policy state of one GPU. It is not safe for concurrent use.
type Scheduler struct {
	cfg       Config
	ring      []*tenant // round-robin order
	byID      map[ID]*tenant
	cursor    int // ring index of the last regular turn
	hold      *hold
	preempter *tenant // online tenant to run next, out of turn
	seq       uint64
}

// New returns an empty scheduler.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("slice config: %w", err)
	}
	return &Scheduler{cfg: cfg, byID: map[ID]*tenant{}, cursor: -1}, nil
}

// Config returns the scheduler's settings.
func (s *Scheduler) Config() Config { return s.cfg }

// Add registers a tenant with no work yet.
func (s *Scheduler) Add(id ID, p Params) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("tenant %d: %w", id, err)
	}
	if _, ok := s.byID[id]; ok {
		return fmt.Errorf("tenant %d already exists", id)
	}
	t := &tenant{id: id, params: p}
	s.byID[id] = t
	s.ring = append(s.ring, t)
	return nil
}

// Update changes a tenant's params; a running grant keeps its length.
func (s *Scheduler) Update(id ID, p Params) error {
	t, ok := s.byID[id]
	if !ok {
		return fmt.Errorf("unknown tenant %d", id)
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("tenant %d: %w", id, err)
	}
	s.recap(t, p)
	t.params = p
	return nil
}

// Remove deletes a tenant; if it held the GPU the grant ends now.
func (s *Scheduler) Remove(id ID, now time.Time) []Action {
	t, ok := s.byID[id]
	if !ok {
		return nil
	}
	if s.preempter == t {
		s.preempter = nil
	}
	if s.hold != nil && s.hold.t == t {
		s.settle(now)
	}
	for i, r := range s.ring {
		if r == t {
			s.ring = append(s.ring[:i], s.ring[i+1:]...)
			if i <= s.cursor {
				s.cursor--
			}
			break
		}
	}
	delete(s.byID, id)
	return s.dispatch(now)
}

// Acquire records that a tenant has work. The GPU is granted at once if free; an
// online tenant with enough banked time makes an offline holder hand over.
func (s *Scheduler) Acquire(id ID, now time.Time) ([]Action, error) {
	t, ok := s.byID[id]
	if !ok {
		return nil, fmt.Errorf("unknown tenant %d", id)
	}
	t.waiting, t.expired = true, false
	h := s.hold
	switch {
	case h == nil:
		return s.dispatch(now), nil
	case h.t == t:
		return []Action{{Kind: ActGrant, Tenant: id, Grant: h.g}}, nil
	case !s.canPreempt(t, now):
		return s.shared(now), nil
	}
	h.g.Alone = false
	s.preempter = t
	if h.revoked {
		return nil, nil
	}
	h.revoked = true
	h.hardEnd = now.Add(s.cfg.Grace)
	return []Action{{Kind: ActRevoke, Tenant: h.t.id, Grant: h.g}}, nil
}

func (s *Scheduler) canPreempt(t *tenant, now time.Time) bool {
	h := s.hold
	return s.cfg.Burst && s.preempter == nil && t.params.Priority == High &&
		h.t.params.Priority == Low && t.bank.total(now, s.cfg.BankMaxAge) >= s.cfg.PreemptMin && s.ready(t, now)
}

// Release ends grant seq of tenant id: more says whether it still has work.
// A release of a grant that is no longer current is ignored.
func (s *Scheduler) Release(id ID, seq uint64, now time.Time, more bool) ([]Action, error) {
	t, ok := s.byID[id]
	if !ok {
		return nil, fmt.Errorf("unknown tenant %d", id)
	}
	t.expired = false
	h := s.hold
	if h == nil || h.t != t || h.g.Seq != seq {
		if !more && (h == nil || h.t != t) {
			t.waiting = false
		}
		return nil, nil
	}
	if h.revoked {
		t.overrun.add(now.Sub(h.hardEnd.Add(-s.cfg.Grace)))
	}
	s.settle(now)
	t.waiting = more
	return s.dispatch(now), nil
}

// Tick renews the grant of a holder no one else waits for shortly before its
// end, revokes a grant that reached its end, takes the GPU from a holder that
// did not hand over within the grace time, and hands an idle GPU to a tenant
// whose ceiling held it back. Call it at NextDeadline.
func (s *Scheduler) Tick(now time.Time) []Action {
	h := s.hold
	if h == nil {
		return s.dispatch(now)
	}
	if !h.revoked {
		if at, ok := s.renewAt(); ok && !now.Before(at) {
			return s.renew(now)
		}
		if now.Before(h.g.End) {
			return nil
		}
		h.revoked = true
		h.hardEnd = h.g.End.Add(s.cfg.Grace)
		return []Action{{Kind: ActRevoke, Tenant: h.t.id, Grant: h.g}}
	}
	if now.Before(h.hardEnd) {
		return nil
	}
	t, g := h.t, h.g
	t.overrun.add(s.cfg.Grace)
	s.settle(h.hardEnd)
	// A holder that did not hand over in time never said it was done: it
	// may only be late for want of a CPU. It keeps its place in line (were
	// it dropped, the others' grants would be renewed as if it had no work
	// until it asks again, and its bank, capped at a few of its slices,
	// would not give that back). Once: a tenant whose grants expire twice in
	// a row without a release or an ask in between is taken to have no
	// work until it asks again.
	again := !t.expired
	t.waiting, t.expired = again, true
	return append([]Action{{Kind: ActExpire, Tenant: t.id, Grant: g, Again: again}}, s.dispatch(now)...)
}

// NextDeadline is when Tick has something to do; ok is false when nothing is
// held and no tenant with work waits for its ceiling's next window.
func (s *Scheduler) NextDeadline() (at time.Time, ok bool) {
	switch h := s.hold; {
	case h == nil:
		return s.heldBackUntil()
	case h.revoked:
		return h.hardEnd, true
	default:
		if at, ok := s.renewAt(); ok {
			return at, true
		}
		return h.g.End, true
	}
}

// Holder returns the current grant.
func (s *Scheduler) Holder() (Grant, bool) {
	if s.hold == nil {
		return Grant{}, false
	}
	return s.hold.g, true
}

// settle charges the holder for its time: unused slice time is banked, time past
// its slice is withdrawn from the bank, and what the bank cannot cover becomes debt.
func (s *Scheduler) settle(now time.Time) {
	h := s.hold
	s.hold = nil
	t := h.t
	used := max(now.Sub(h.g.Start), 0)
	t.achieved += used
	s.charge(t, used, now)
	own := h.g.SliceEnd.Sub(h.g.Start)
	if used < own {
		s.deposit(t, own-used, now)
		return
	}
	t.debt += t.bank.withdraw(used-own, h.g.Start, s.cfg.BankMaxAge)
}

func (s *Scheduler) deposit(t *tenant, d time.Duration, now time.Time) {
	if repay := min(d, t.debt); repay > 0 { // debt is repaid before anything is banked
		t.debt -= repay
		d -= repay
	}
	if !s.cfg.Burst || d <= 0 {
		return
	}
	capacity := time.Duration(s.cfg.BankMaxSlices) * s.cfg.SliceOf(t.params)
	t.bank.deposit(d, now, s.cfg.BankMaxAge, capacity)
}
