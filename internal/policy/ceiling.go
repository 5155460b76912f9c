package policy

import (
	"fmt"
	"time"
)

// ceiling is a capped tenant's budget (Params.ShareMax): in every window of
// one Config.Period, counted from when the cap was first used, the tenant may
// hold the GPU for at most ShareMax x Period. The time it held is charged when
// its grant ends, all of it (the time past a revoke too); what it held past its
// budget is an overdraft taken off the following windows. Unused budget is not
// carried over.
type ceiling struct {
	set   bool
	start time.Time     // start of the current window
	used  time.Duration // held in it, with the overdraft of earlier windows
}

// capped reports whether p has a ceiling below the whole GPU.
func capped(p Params) bool { return p.ShareMax > 0 && p.ShareMax < 1 }

// quota is a window's budget under cap m.
func (c Config) quota(m float64) time.Duration {
	return time.Duration(m * float64(c.Period))
}

// minLeft is the least budget a grant is made for: the minimum slice, or the
// whole quota when that is smaller.
func (c Config) minLeft(m float64) time.Duration {
	return max(min(c.MinSlice, c.quota(m)), 1)
}

// refresh moves t's window to the one holding now; each window passed
// repays a quota of overdraft.
func (s *Scheduler) refresh(t *tenant, now time.Time) {
	if !capped(t.params) {
		t.ceil.set = false
		return
	}
	c := &t.ceil
	if !c.set {
		*c = ceiling{set: true, start: now}
		return
	}
	if el := now.Sub(c.start); el >= s.cfg.Period {
		k := int64(el / s.cfg.Period) // periods passed
		c.start = c.start.Add(time.Duration(k) * s.cfg.Period)
		// k x quota <= the time passed: no overflow.
		c.used = max(0, c.used-time.Duration(k)*s.cfg.quota(t.params.ShareMax))
	}
}

// budget is how long t may hold the GPU from now, and false if it is held
// back (its budget for this window is spent). A tenant without a ceiling has
// no limit (0, true).
func (s *Scheduler) budget(t *tenant, now time.Time) (time.Duration, bool) {
	if !capped(t.params) {
		return 0, true
	}
	s.refresh(t, now)
	left := s.cfg.quota(t.params.ShareMax) - t.ceil.used
	return left, left >= s.cfg.minLeft(t.params.ShareMax)
}

// ready reports whether t has work and may take the GPU now.
func (s *Scheduler) ready(t *tenant, now time.Time) bool {
	if !t.waiting {
		return false
	}
	_, ok := s.budget(t, now)
	return ok
}

// charge takes the time t held off its budget.
func (s *Scheduler) charge(t *tenant, used time.Duration, now time.Time) {
	if !capped(t.params) {
		return
	}
	s.refresh(t, now)
	t.ceil.used += used
}

// heldBackUntil is the earliest time a waiting, held-back tenant gets its
// budget back (ok false: none waits for one).
func (s *Scheduler) heldBackUntil() (at time.Time, ok bool) {
	for _, t := range s.ring {
		if !t.waiting || !capped(t.params) || !t.ceil.set {
			continue
		}
		q, need := s.cfg.quota(t.params.ShareMax), s.cfg.minLeft(t.params.ShareMax)
		over := t.ceil.used - (q - need) // budget to be repaid before a grant
		if over <= 0 {
			continue // not held back
		}
		k := int64((over + q - 1) / q) // periods to repay it
		if next := t.ceil.start.Add(time.Duration(k) * s.cfg.Period); !ok || next.Before(at) {
			at, ok = next, true
		}
	}
	return at, ok
}

// recap carries t's window over a change of its ceiling: what it held in the
// window counts against the new ceiling at once; a first ceiling starts a
// window when next used.
func (s *Scheduler) recap(t *tenant, p Params) {
	if !capped(p) || !capped(t.params) {
		t.ceil.set = false
	}
}

// Budget is a capped tenant's standing under its ceiling: its current window
// and the time it held in it (with any overdraft). A caller that removes a
// tenant and adds it back later (a group whose last process left) restores it,
// so that leaving and coming back never starts a fresh budget.
type Budget struct {
	Start time.Time
	Used  time.Duration
	// Until is when it no longer matters: every overdraft repaid.
	Until time.Time
}

// Budget returns tenant id's standing at now, counting a running grant up to
// now; ok is false for a tenant without a ceiling or that never used it.
func (s *Scheduler) Budget(id ID, now time.Time) (b Budget, ok bool) {
	t := s.byID[id]
	if t == nil || !capped(t.params) || !t.ceil.set {
		return Budget{}, false
	}
	s.refresh(t, now)
	used := t.ceil.used
	if h := s.hold; h != nil && h.t == t {
		used += max(now.Sub(h.g.Start), 0)
	}
	q := s.cfg.quota(t.params.ShareMax)
	k := int64((used + q - 1) / q) // windows until it is repaid (this one counts)
	return Budget{Start: t.ceil.start, Used: used, Until: t.ceil.start.Add(time.Duration(max(k, 1)) * s.cfg.Period)}, true
}

// Restore gives tenant id the standing b (from Budget), if it has a ceiling.
func (s *Scheduler) Restore(id ID, b Budget) error {
	t := s.byID[id]
	if t == nil {
		return fmt.Errorf("unknown tenant %d", id)
	}
	if capped(t.params) && b.Used > 0 {
		t.ceil = ceiling{set: true, start: b.Start, used: b.Used}
	}
	return nil
}
