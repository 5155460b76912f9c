// Package mps runs gpuslice's MPS sharing mode on a node: one MPS control
// daemon per GPU (and server slot), supervised (restarted with backoff after a
// failure, stopped cleanly with `quit`), the count of its live clients, and
// the numbers a container needs to be a client (active thread percentage from
// its units, pinned memory limit from its memory). The restart policy is pure
// (policy.go, tested with a fake clock); daemon.go does the exec.
package mps

import "time"

// Policy is the restart policy of a supervised daemon.
type Policy struct {
	// Initial is the delay after the first failure; it doubles with each
	// failure in a row up to Max.
	Initial, Max time.Duration
	// Stable: a run at least this long resets the failure count.
	Stable time.Duration
}

// DefaultPolicy restarts after 100 ms, backing off to 10 s, and forgets
// failures after a minute of running.
func DefaultPolicy() Policy {
	return Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Stable: time.Minute}
}

// Backoff tracks consecutive failures under a Policy. Not safe for
// concurrent use.
type Backoff struct {
	p     Policy
	fails int
}

// NewBackoff returns a Backoff with no failures.
func NewBackoff(p Policy) *Backoff { return &Backoff{p: p} }

// Exited records a run from started to exited and returns how long to wait
// before the next start.
func (b *Backoff) Exited(started, exited time.Time) time.Duration {
	if exited.Sub(started) >= b.p.Stable {
		b.fails = 0
	}
	d := b.p.Initial
	for i := 0; i < b.fails && d < b.p.Max; i++ {
		d *= 2
	}
	if d > b.p.Max {
		d = b.p.Max
	}
	if d < b.p.Max {
		b.fails++
	}
	return d
}

// Failures is the number of failures in a row so far.
func (b *Backoff) Failures() int { return b.fails }
