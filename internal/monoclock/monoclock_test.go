package monoclock

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The anchor maps time.Now to what clock_gettime reads around it, within the
// anchor's own error (and the readings' spacing, which the check brackets).
func TestAnchorMatchesClock(t *testing.T) {
	a := NewAnchor()
	if a.Err > time.Millisecond {
		t.Fatalf("anchor error %v", a.Err)
	}
	slack := uint64(a.Err)/2 + 1
	for range 1000 {
		before := Now()
		got := a.Ns(time.Now())
		after := Now()
		if got+slack < before || got > after+slack {
			t.Fatalf("anchor gave %d, clock read %d..%d (slack %d)", got, before, after, slack)
		}
	}
	later := time.Now().Add(3 * time.Second)
	if d := a.Ns(later) - a.Ns(later.Add(-3*time.Second)); d != uint64(3*time.Second) {
		t.Fatalf("3 s apart mapped %d ns apart", d)
	}
}

func TestParseMonotonicOffset(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"monotonic           0         0\nboottime            0         0\n", 0, ""},
		{"boottime 7 0\nmonotonic -3 250\n", -3*time.Second + 250, ""},
		{"1 86400 5\n7 0 0\n", 24*time.Hour + 5, ""},
		{"monotonic 5 1000000000\n", 0, "nanoseconds"},
		{"monotonic 5 -1\n", 0, "nanoseconds"},
		{"monotonic x 0\n", 0, "seconds"},
		{"monotonic 9223372036854775807 0\n", 0, "out of range"},
		{"monotonic 0\n", 0, "malformed"},
		{"boottime 0 0\n", 0, "no monotonic line"},
		{"", 0, "no monotonic line"},
	} {
		got, err := ParseMonotonicOffset([]byte(tc.in))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestShared(t *testing.T) {
	root := t.TempDir()
	if ok, err := Shared(root); !ok || err != nil { // no time namespaces: one clock
		t.Fatalf("no offsets file: %v %v", ok, err)
	}
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]bool{"monotonic 0 0\nboottime 9 0\n": true, "monotonic 0 1\n": false} {
		if err := os.WriteFile(filepath.Join(root, "self", "timens_offsets"), []byte(in), 0o644); err != nil {
			t.Fatal(err)
		}
		if ok, err := Shared(root); ok != want || err != nil {
			t.Errorf("%q: shared %v %v, want %v", in, ok, err, want)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "self", "timens_offsets"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, err := Shared(root); ok || err == nil {
		t.Fatalf("garbage: shared %v %v", ok, err)
	}
}

func FuzzParseMonotonicOffset(f *testing.F) {
	f.Add([]byte("monotonic           0         0\nboottime            0         0\n"))
	f.Add([]byte("1 -5 999999999\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseMonotonicOffset(b)
		if err != nil {
			return
		}
		// As the kernel writes it: whole seconds (floor) and 0..1e9 ns.
		sec, nsec := int64(d/time.Second), int64(d%time.Second)
		if nsec < 0 {
			sec, nsec = sec-1, nsec+int64(time.Second)
		}
		again, err := ParseMonotonicOffset(fmt.Appendf(nil, "monotonic %d %d\n", sec, nsec))
		if err != nil || again != d {
			t.Fatalf("%v rendered as %d %d parsed to %v %v", d, sec, nsec, again, err)
		}
	})
}
