package policy

import "time"

// renewAt is when the running grant is renewed, if it is: the holder is
// alone (no other tenant waits, no online tenant is about to preempt), has no
// ceiling (a capped tenant's grants end to keep it under its ceiling), the
// grant was not revoked, and renewal is on. The lead is Config.Renew, at most
// half the holder's slice.
func (s *Scheduler) renewAt() (time.Time, bool) {
	h := s.hold
	if s.cfg.Renew <= 0 || h == nil || h.revoked || h.noRenew || s.preempter != nil || capped(h.t.params) {
		return time.Time{}, false
	}
	for _, t := range s.ring {
		if t != h.t && t.waiting {
			return time.Time{}, false
		}
	}
	lead := min(s.cfg.Renew, s.cfg.SliceOf(h.t.params)/2)
	return h.g.End.Add(-lead), true
}

// renew extends the lone holder's grant by its next turn: its slice (less
// debt repaid), from the grant's end. The grant keeps its Seq and Start, so
// its settlement charges the whole time held against the slices it was given.
// Every other tenant without work banks a slice, as a round passing it would
// have (a tenant that took its turn early loses that forfeit instead).
// A tenant that starts waiting after the renewal waits for the renewed end.
func (s *Scheduler) renew(now time.Time) []Action {
	h := s.hold
	t := h.t
	own := s.cfg.SliceOf(t.params)
	if repay := min(t.debt, own-s.cfg.MinSlice); repay > 0 {
		t.debt -= repay
		own -= repay
	}
	for _, o := range s.ring {
		switch {
		case o == t:
		case o.forfeit:
			o.forfeit = false
		default:
			o.passed++
			s.deposit(o, s.cfg.SliceOf(o.params), now)
		}
	}
	h.g.SliceEnd = h.g.SliceEnd.Add(own)
	h.g.End = h.g.End.Add(own)
	h.g.Alone = true
	h.renewed = true
	t.renewals++
	return []Action{{Kind: ActRenew, Tenant: t.id, Grant: h.g}}
}

// Queued says that the holder id has work queued for its next turn beside the
// running grant (the time-slice daemon: a member of the holding group handed its
// part back and waits). The grant is then not renewed: it ends, is revoked at
// its end, and the next turn is a new grant. An Alone grant loses Alone.
func (s *Scheduler) Queued(id ID) []Action {
	h := s.hold
	if h == nil || h.t.id != id || h.noRenew {
		return nil
	}
	h.noRenew = true
	if !h.g.Alone {
		return nil
	}
	h.g.Alone = false
	return []Action{{Kind: ActRenew, Tenant: id, Grant: h.g}}
}

// shared tells a lone holder that another tenant now waits (an ActRenew
// without Alone). A holder whose grant was renewed may hold up to a slice of
// work queued ahead (its queue is not bound to a renewal's end), so its grant
// is stretched to at least a slice from now: at that end it has drained to the
// usual bound, and the tenant that asked waits at most a slice (plus the lead).
func (s *Scheduler) shared(now time.Time) []Action {
	h := s.hold
	if !h.g.Alone {
		return nil
	}
	h.g.Alone = false
	if end := now.Add(s.cfg.SliceOf(h.t.params)); h.renewed && end.After(h.g.End) {
		h.g.SliceEnd = h.g.SliceEnd.Add(end.Sub(h.g.End))
		h.g.End = end
	}
	return []Action{{Kind: ActRenew, Tenant: h.t.id, Grant: h.g}}
}
