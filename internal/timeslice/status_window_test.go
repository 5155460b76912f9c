package timeslice

import (
	"testing"
	"time"
)

// TestWindow: a new sample is appended and old samples are dropped while the
// next one is already a whole shareWindow old: the first sample kept is the
// newest at or before the window's edge (a single sample is always kept).
func TestWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) sample { return sample{at: t0.Add(d), achieved: d} }
	for _, tc := range []struct {
		name string
		h    []sample
		now  time.Duration
		want []time.Duration // the kept samples' times
	}{
		{name: "first", now: 0, want: []time.Duration{0}},
		{name: "inside", h: []sample{at(0), at(400 * time.Millisecond)}, now: 900 * time.Millisecond,
			want: []time.Duration{0, 400 * time.Millisecond, 900 * time.Millisecond}},
		{name: "start kept at the edge", h: []sample{at(0), at(500 * time.Millisecond)}, now: 1200 * time.Millisecond,
			want: []time.Duration{0, 500 * time.Millisecond, 1200 * time.Millisecond}},
		{name: "old dropped", h: []sample{at(0), at(100 * time.Millisecond), at(200 * time.Millisecond), at(1500 * time.Millisecond)},
			now: 1600 * time.Millisecond, want: []time.Duration{200 * time.Millisecond, 1500 * time.Millisecond, 1600 * time.Millisecond}},
		{name: "exactly one window", h: []sample{at(0), at(time.Second)}, now: 2 * time.Second,
			want: []time.Duration{time.Second, 2 * time.Second}},
		{name: "all old: the newest old one is the start", h: []sample{at(0), at(100 * time.Millisecond)}, now: 5 * time.Second,
			want: []time.Duration{100 * time.Millisecond, 5 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := window(tc.h, at(tc.now), t0.Add(tc.now))
			if len(got) != len(tc.want) {
				t.Fatalf("kept %d samples %v, want %v", len(got), got, tc.want)
			}
			for i, s := range got {
				if s.at != t0.Add(tc.want[i]) {
					t.Errorf("sample %d at %v, want %v", i, s.at.Sub(t0), tc.want[i])
				}
			}
		})
	}
}
