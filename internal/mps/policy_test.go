package mps

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second, Stable: time.Minute}
	b := NewBackoff(p)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // fake clock
	run := func(d time.Duration) time.Duration {
		start := now
		now = now.Add(d)
		wait := b.Exited(start, now)
		now = now.Add(wait)
		return wait
	}
	steps := []struct {
		ran, want time.Duration
	}{
		{time.Second, 100 * time.Millisecond},      // first failure
		{time.Second, 200 * time.Millisecond},      // doubles
		{time.Second, 400 * time.Millisecond},      //
		{time.Second, 800 * time.Millisecond},      //
		{time.Second, time.Second},                 // capped
		{time.Second, time.Second},                 // stays capped
		{2 * time.Minute, 100 * time.Millisecond},  // a stable run resets
		{time.Millisecond, 200 * time.Millisecond}, // then backs off again
	}
	for i, s := range steps {
		if got := run(s.ran); got != s.want {
			t.Fatalf("step %d (ran %s): wait %s, want %s", i, s.ran, got, s.want)
		}
	}
}

func TestThreadPercentage(t *testing.T) {
	for _, tc := range []struct {
		units, server int64
		want          int
		err           bool
	}{
		{25, 100, 25, false}, {25, 96, 27, false}, {1, 96, 2, false}, {96, 96, 100, false}, {200, 96, 100, false},
		{0, 96, 0, true}, {10, 0, 0, true}, {-1, 96, 0, true},
	} {
		got, err := ThreadPercentage(tc.units, tc.server)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("ThreadPercentage(%d, %d) = %d, %v; want %d, error %v", tc.units, tc.server, got, err, tc.want, tc.err)
		}
	}
}

func TestPinnedMemLimitAndFreeUnits(t *testing.T) {
	for _, tc := range []struct {
		mem  int64
		gpus int
		want string
	}{
		{10 << 30, 1, "0=10240M"}, {3 << 20, 2, "0=3M,1=3M"}, {100, 1, "0=1M"}, {0, 1, ""}, {1 << 30, 0, ""},
	} {
		if got := PinnedMemLimit(tc.mem, tc.gpus); got != tc.want {
			t.Errorf("PinnedMemLimit(%d, %d) = %q, want %q", tc.mem, tc.gpus, got, tc.want)
		}
	}
	for _, tc := range []struct {
		unbooked            int64
		live, slots, perCli int
		want                int64
	}{
		{96, 0, 48, 2, 96}, {71, 1, 48, 2, 71}, {48, 48, 48, 2, 0}, {50, 40, 48, 2, 16}, {10, 60, 48, 2, 0}, {-5, 0, 48, 2, 0},
	} {
		if got := FreeUnits(tc.unbooked, tc.live, tc.slots, tc.perCli); got != tc.want {
			t.Errorf("FreeUnits(%d, %d, %d, %d) = %d, want %d", tc.unbooked, tc.live, tc.slots, tc.perCli, got, tc.want)
		}
	}
}

func TestParseModes(t *testing.T) {
	gpus := []GPURef{{0, "GPU-a"}, {1, "GPU-b"}}
	for _, tc := range []struct {
		spec string
		want string // modes of GPU-a, GPU-b
		err  bool
	}{
		{"", "timeslice,timeslice", false}, {"mps", "mps,mps", false}, {"timeslice", "timeslice,timeslice", false},
		{"1=mps", "timeslice,mps", false}, {"GPU-a=mps, 1=timeslice", "mps,timeslice", false},
		{"MPS", "", true}, {"2=mps", "", true}, {"0=mps,GPU-a=mps", "", true}, {"0", "", true}, {"0=mps,", "", true},
	} {
		m, err := ParseModes(tc.spec, gpus)
		if (err != nil) != tc.err {
			t.Errorf("ParseModes(%q) error %v, want error %v", tc.spec, err, tc.err)
			continue
		}
		if err == nil {
			if got := string(m["GPU-a"]) + "," + string(m["GPU-b"]); got != tc.want {
				t.Errorf("ParseModes(%q) = %s, want %s", tc.spec, got, tc.want)
			}
		}
	}
}
