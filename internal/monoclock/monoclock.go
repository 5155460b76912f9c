// Package monoclock is CLOCK_MONOTONIC as other processes on the host read it:
// the clock of the time-slice protocol's grant instants (proto.Grant.SentAtNs),
// which the daemon (Go) and libgpuslice (C) compare.
//
// Go's time.Time carries a monotonic reading that is CLOCK_MONOTONIC on Linux,
// but only relative to the process's start; Anchor maps it to the absolute
// value. Shared says whether this process's CLOCK_MONOTONIC is the host's: a
// time namespace (time_namespaces(7)) may offset it, and then instants from
// another process cannot be compared with its own. Our own code: no maintained
// library converts Go's monotonic readings or reads timens_offsets.
package monoclock

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Now reads CLOCK_MONOTONIC in nanoseconds.
func Now() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", err)) // cannot fail on Linux
	}
	return uint64(ts.Nano())
}

// Anchor maps Go times (with their monotonic reading) to CLOCK_MONOTONIC ns.
type Anchor struct {
	t  time.Time
	ns int64
	// Err bounds the mapping's error: the time between the readings it was
	// made from.
	Err time.Duration
}

// NewAnchor reads both clocks side by side and keeps the closest of a few
// pairs (a pair split by preemption is discarded).
func NewAnchor() Anchor {
	best := Anchor{Err: time.Hour}
	for range 8 {
		before := time.Now()
		ns := int64(Now())
		after := time.Now()
		if d := after.Sub(before); d < best.Err {
			best = Anchor{t: before.Add(d / 2), ns: ns, Err: d}
		}
	}
	return best
}

// Ns is t on CLOCK_MONOTONIC (t must carry a monotonic reading: from
// time.Now, not parsed or stripped).
func (a Anchor) Ns(t time.Time) uint64 {
	return uint64(a.ns + int64(t.Sub(a.t)))
}

// Shared reports whether this process's CLOCK_MONOTONIC is the host's: its
// time namespace (procRoot/self/timens_offsets) has no monotonic offset. A
// kernel without time namespaces (no such file) has one clock. A file that
// cannot be read or parsed is an error (the caller then does not compare
// instants with other processes).
func Shared(procRoot string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "self", "timens_offsets"))
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("time namespace offsets: %w", err)
	}
	off, err := ParseMonotonicOffset(b)
	if err != nil {
		return false, err
	}
	return off == 0, nil
}

// ParseMonotonicOffset reads the monotonic line of a timens_offsets file
// ("monotonic <seconds> <nanoseconds>"; the clock may also be named by its
// id, 1).
func ParseMonotonicOffset(b []byte) (time.Duration, error) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return 0, fmt.Errorf("time namespace offsets: malformed line %q", line)
		}
		if name := string(f[0]); name != "monotonic" && name != "1" {
			continue
		}
		sec, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("time namespace offsets: seconds: %w", err)
		}
		nsec, err := strconv.ParseInt(string(f[2]), 10, 64)
		if err != nil || nsec < 0 || nsec >= int64(time.Second) {
			return 0, fmt.Errorf("time namespace offsets: nanoseconds %q", f[2])
		}
		if maxSec := int64(math.MaxInt64/time.Second) - 1; sec > maxSec || sec < -maxSec {
			return 0, fmt.Errorf("time namespace offsets: %d seconds out of range", sec)
		}
		return time.Duration(sec)*time.Second + time.Duration(nsec), nil
	}
	return 0, errors.New("time namespace offsets: no monotonic line")
}
