// Package policy is the pure time-slice policy of one GPU: tenants with a slice
// length (or a share of the period), a priority and a burst buffer of banked,
// expiring time; it decides who holds the GPU next and for how long.
//
// The policy is work-conserving: idle time goes to whoever has work. A tenant
// with a ceiling (Params.ShareMax) is the exception: its window is the period
// (Config.Period, 100 ms by default), counted from when its cap was first
// used, and in every window it holds the GPU at most ShareMax x Period, alone
// or not, burst buffer or not; the GPU idles rather than exceed it. All the
// time it held counts (a hand-over past its grant's end too); what went past
// its budget is taken off its next windows, so over any span T it holds at
// most ShareMax x (T + Period).
//
// Nothing here reads a clock, sleeps or does I/O: every call takes the current
// time, and the caller (the time-slice daemon, or a test with a fake clock) turns the
// returned actions into messages and calls Tick at NextDeadline.
package policy

import (
	"errors"
	"fmt"
	"time"
)

// Priority orders tenants: online (High) work gets larger default slices and may
// spend its banked time ahead of offline (Low) work at the next kernel boundary.
type Priority uint8

// The priorities.
const (
	Low  Priority = 0
	High Priority = 1
)

func (p Priority) String() string {
	switch p {
	case Low:
		return "low"
	case High:
		return "high"
	}
	return fmt.Sprintf("priority(%d)", uint8(p))
}

// ParsePriority parses "high"/"online" or "low"/"offline".
func ParsePriority(s string) (Priority, error) {
	switch s {
	case "high", "online":
		return High, nil
	case "low", "offline":
		return Low, nil
	}
	return Low, fmt.Errorf("invalid priority %q: want high or low", s)
}

// Params are one tenant's settings. At most one of Slice and Share is set; with
// neither, the tenant gets the default slice of its priority. ShareMax caps the
// tenant's GPU time; below Share, the cap wins.
type Params struct {
	Slice    time.Duration // explicit slice length per period
	Share    float64       // fraction of Config.Period, in (0, 1]
	Priority Priority
	// ShareMax is the most of the GPU's time the tenant holds, a fraction in
	// [MinShareMax, 1]; 0: no ceiling (work-conserving).
	ShareMax float64
}

// MinShareMax is the smallest ceiling a tenant may set (1 %).
const MinShareMax = 0.01

// Config holds the policy settings shared by all tenants of one GPU.
type Config struct {
	// Period is the reference period that Params.Share is a fraction of.
	Period time.Duration
	// DefaultSlice is a low-priority tenant's slice when it sets none;
	// high-priority tenants get HighFactor times as much.
	DefaultSlice time.Duration
	HighFactor   int
	// MinSlice bounds every slice from below (also after debt is repaid from it).
	MinSlice time.Duration
	// Burst enables burst buffers: unused slice time is banked and spent later.
	Burst bool
	// BankMaxAge is how long banked time stays usable.
	BankMaxAge time.Duration
	// BankMaxSlices caps a tenant's bank at this many of its slices.
	BankMaxSlices int
	// Grace is how long a holder whose grant ended (or was revoked) may take to
	// finish its outstanding work and hand over before the GPU is taken away.
	Grace time.Duration
	// PreemptMin is the least banked time an online tenant needs to preempt.
	PreemptMin time.Duration
	// Renew is how long before its grant's end a holder that no other tenant
	// waits for gets its grant renewed for its next turn (ActRenew), instead
	// of handing over and asking again: a lone tenant's queue never drains.
	// At most half the holder's slice; 0 turns renewal off.
	Renew time.Duration
}

// DefaultConfig returns the defaults documented in docs/timeslice.md.
func DefaultConfig() Config {
	return Config{
		Period:        100 * time.Millisecond,
		DefaultSlice:  10 * time.Millisecond,
		HighFactor:    2,
		MinSlice:      100 * time.Microsecond,
		Burst:         true,
		BankMaxAge:    time.Second,
		BankMaxSlices: 4,
		Grace:         20 * time.Millisecond,
		PreemptMin:    500 * time.Microsecond,
		Renew:         2 * time.Millisecond,
	}
}

// Limits on the values a tenant or config may set.
const (
	MaxSlice  = 10 * time.Second
	MaxPeriod = 10 * time.Second
)

// Validate reports the first invalid field of c.
func (c Config) Validate() error {
	switch {
	case c.Period <= 0 || c.Period > MaxPeriod:
		return fmt.Errorf("period %v: must be in (0, %v]", c.Period, MaxPeriod)
	case c.MinSlice <= 0 || c.MinSlice > c.DefaultSlice:
		return fmt.Errorf("minimum slice %v: must be positive and at most the default slice", c.MinSlice)
	case c.DefaultSlice > MaxSlice:
		return fmt.Errorf("default slice %v: must be at most %v", c.DefaultSlice, MaxSlice)
	case c.HighFactor < 1 || c.HighFactor > 100:
		return fmt.Errorf("high-priority factor %d: must be in [1, 100]", c.HighFactor)
	case c.BankMaxAge < 0 || c.BankMaxSlices < 0:
		return errors.New("burst buffer age and size must not be negative")
	case c.Grace <= 0:
		return fmt.Errorf("grace %v: must be positive", c.Grace)
	case c.PreemptMin < 0:
		return fmt.Errorf("preempt minimum %v: must not be negative", c.PreemptMin)
	case c.Renew < 0 || c.Renew > MaxSlice:
		return fmt.Errorf("renewal lead %v: must be in [0, %v]", c.Renew, MaxSlice)
	}
	return nil
}

// Validate reports whether p is usable.
func (p Params) Validate() error {
	switch {
	case p.Slice != 0 && p.Share != 0:
		return errors.New("set either a slice or a share, not both")
	case p.Slice < 0 || p.Slice > MaxSlice:
		return fmt.Errorf("slice %v: must be in (0, %v]", p.Slice, MaxSlice)
	case p.Share < 0 || p.Share > 1 || p.Share != p.Share:
		return fmt.Errorf("share %v: must be in (0%%, 100%%]", p.Share)
	case p.Priority != Low && p.Priority != High:
		return fmt.Errorf("unknown priority %d", p.Priority)
	case p.ShareMax != 0 && !(p.ShareMax >= MinShareMax && p.ShareMax <= 1):
		return fmt.Errorf("share ceiling %v: must be in [%g%%, 100%%]", p.ShareMax, MinShareMax*100)
	}
	return nil
}

// SliceOf is the slice length p gets under c (before debt).
func (c Config) SliceOf(p Params) time.Duration {
	var d time.Duration
	switch {
	case p.Slice > 0:
		d = p.Slice
	case p.Share > 0:
		d = time.Duration(p.Share * float64(c.Period))
	case p.Priority == High:
		d = c.DefaultSlice * time.Duration(c.HighFactor)
	default:
		d = c.DefaultSlice
	}
	return max(d, c.MinSlice)
}
