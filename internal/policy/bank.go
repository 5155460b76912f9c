package policy

import "time"

// entry is one deposit of unused slice time.
type entry struct {
	amount time.Duration
	at     time.Time
}

// bank is a burst buffer: deposits that expire maxAge after they were made,
// spent oldest first (the ones closest to expiry).
type bank struct {
	entries []entry
}

// prune drops the deposits older than maxAge at now.
func (b *bank) prune(now time.Time, maxAge time.Duration) {
	i := 0
	for i < len(b.entries) && now.Sub(b.entries[i].at) >= maxAge {
		i++
	}
	if i > 0 {
		b.entries = append(b.entries[:0], b.entries[i:]...)
	}
}

// total is the usable banked time at now.
func (b *bank) total(now time.Time, maxAge time.Duration) time.Duration {
	b.prune(now, maxAge)
	var t time.Duration
	for _, e := range b.entries {
		t += e.amount
	}
	return t
}

// deposit adds d at now and trims the oldest deposits so the bank holds at most capacity.
func (b *bank) deposit(d time.Duration, now time.Time, maxAge, capacity time.Duration) {
	if d <= 0 || capacity <= 0 || maxAge <= 0 {
		return
	}
	b.entries = append(b.entries, entry{amount: d, at: now})
	excess := b.total(now, maxAge) - capacity
	for excess > 0 && len(b.entries) > 0 {
		take := min(excess, b.entries[0].amount)
		b.entries[0].amount -= take
		excess -= take
		if b.entries[0].amount == 0 {
			b.entries = b.entries[1:]
		}
	}
}

// withdraw spends up to d, oldest first, and returns what it could not cover.
func (b *bank) withdraw(d time.Duration, now time.Time, maxAge time.Duration) time.Duration {
	b.prune(now, maxAge)
	for d > 0 && len(b.entries) > 0 {
		take := min(d, b.entries[0].amount)
		b.entries[0].amount -= take
		d -= take
		if b.entries[0].amount == 0 {
			b.entries = b.entries[1:]
		}
	}
	return d
}
