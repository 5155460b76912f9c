package policy

import "time"

// dispatch picks the next holder when the GPU is free: a pending online
// preempter first, else the next tenant in round-robin order that has work.
// Tenants passed over for lack of work bank their whole slice (no idle slot);
// tenants held back by their ceiling are passed over and bank nothing.
func (s *Scheduler) dispatch(now time.Time) []Action {
	if s.hold != nil {
		return nil
	}
	if p := s.preempter; p != nil {
		s.preempter = nil
		if s.ready(p, now) {
			return s.grant(p, now, true)
		}
	}
	n := len(s.ring)
	if n == 0 {
		return nil
	}
	for {
		start := s.cursor + 1
		var passed []*tenant
		// Two rounds: a tenant that forfeited its turn is skipped in the first only.
		for step := 0; step < 2*n; step++ {
			t := s.ring[(start+step)%n]
			if !s.ready(t, now) {
				continue
			}
			if t.forfeit {
				t.forfeit = false
				continue
			}
			// A tenant owing at least a whole slice (its kernels ran far past
			// its slices) passes its turn, and repays a slice once another
			// tenant takes the GPU: shares hold even when kernels outlast slices.
			if t.debt >= s.cfg.SliceOf(t.params) {
				passed = append(passed, t)
				continue
			}
			for _, p := range passed {
				p.debt = max(0, p.debt-s.cfg.SliceOf(p.params))
			}
			return s.take(start, step, now)
		}
		if len(passed) == 0 {
			return nil
		}
		// Everyone waiting owes at least a slice: a round passes for all of
		// them (a lone debtor is not kept off an otherwise idle GPU).
		for _, t := range s.ring {
			if s.ready(t, now) {
				t.debt = max(0, t.debt-s.cfg.SliceOf(t.params))
			}
		}
	}
}

// take grants the tenant steps after ring index start, banking for those passed.
func (s *Scheduler) take(start, step int, now time.Time) []Action {
	n := len(s.ring)
	s.bankPassed(start, step, now)
	s.cursor = (start + step) % n
	return s.grant(s.ring[s.cursor], now, false)
}

// bankPassed deposits a whole slice for each tenant without work among the
// first steps tenants from ring index start (at most one round).
func (s *Scheduler) bankPassed(start, steps int, now time.Time) {
	n := len(s.ring)
	for i := 0; i < min(steps, n); i++ {
		t := s.ring[(start+i)%n]
		switch {
		case t.waiting:
		case t.forfeit: // its turn was taken early
			t.forfeit = false
		default:
			t.passed++
			s.deposit(t, s.cfg.SliceOf(t.params), now)
		}
	}
}

// grant gives t the GPU: its slice (less debt repaid) plus its banked time,
// both cut to what its ceiling leaves it.
func (s *Scheduler) grant(t *tenant, now time.Time, preempt bool) []Action {
	own := s.cfg.SliceOf(t.params)
	if repay := min(t.debt, own-s.cfg.MinSlice); repay > 0 {
		t.debt -= repay
		own -= repay
	}
	length := own
	if s.cfg.Burst {
		length += t.bank.total(now, s.cfg.BankMaxAge)
	}
	if left, _ := s.budget(t, now); capped(t.params) {
		own, length = min(own, left), min(length, left)
	}
	end := now.Add(length)
	s.seq++
	t.grants++
	t.forfeit = t.forfeit || preempt
	g := Grant{Tenant: t.id, Seq: s.seq, Start: now, SliceEnd: now.Add(own), End: end, Preempt: preempt}
	s.hold = &hold{t: t, g: g}
	_, s.hold.g.Alone = s.renewAt()
	g = s.hold.g
	return []Action{{Kind: ActGrant, Tenant: t.id, Grant: g}}
}

// TenantStats is a read-back of one tenant's state.
type TenantStats struct {
	ID       ID
	Params   Params
	Slice    time.Duration // current slice length (before debt)
	Banked   time.Duration // usable burst-buffer time
	Debt     time.Duration
	Achieved time.Duration // total time held, including the running grant
	Grants   uint64
	Renewals uint64 // grants renewed with no other tenant waiting
	Passed   uint64 // turns that came while it had no work (a slice banked instead)
	// Hand-overs after a revoke: how many, the longest and the p99 (of the
	// last 256) time past the revoke (slice end or preemption) they took.
	Overruns   uint64
	OverrunMax time.Duration
	OverrunP99 time.Duration
	Waiting    bool
	Holding    bool
}

// Stats returns every tenant's state at now, in round-robin order.
func (s *Scheduler) Stats(now time.Time) []TenantStats {
	out := make([]TenantStats, 0, len(s.ring))
	for _, t := range s.ring {
		st := TenantStats{
			ID: t.id, Params: t.params, Slice: s.cfg.SliceOf(t.params),
			Banked: t.bank.total(now, s.cfg.BankMaxAge), Debt: t.debt,
			Achieved: t.achieved, Grants: t.grants, Renewals: t.renewals, Passed: t.passed, Waiting: t.waiting,
			Overruns: t.overrun.n, OverrunMax: t.overrun.max, OverrunP99: t.overrun.p99(),
		}
		if s.hold != nil && s.hold.t == t {
			st.Holding = true
			st.Achieved += max(now.Sub(s.hold.g.Start), 0)
		}
		out = append(out, st)
	}
	return out
}
