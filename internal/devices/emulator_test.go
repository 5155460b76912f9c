package devices

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func mustRule(t testing.TB, s string, allow bool) Rule {
	t.Helper()
	r, err := ParseRule(s, allow)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// write applies "allow LINE" / "deny LINE" writes in order.
func write(t testing.TB, e *Emulator, writes ...string) {
	t.Helper()
	for _, w := range writes {
		allow := w[:5] == "allow"
		line := w[5:]
		if !allow {
			line = w[4:]
		}
		if err := e.Apply(mustRule(t, line, allow)); err != nil {
			t.Fatal(err)
		}
	}
}

// The kernel's behaviour, write by write (security/device_cgroup.c).
func TestEmulatorKernelSemantics(t *testing.T) {
	gpu0, gpu1 := Device{TypeChar, 195, 0}, Device{TypeChar, 195, 1}
	null := Device{TypeChar, 1, 3}
	cases := []struct {
		name   string
		from   bool // default allow
		writes []string
		dev    Device
		perms  Perms
		want   bool
		list   string
	}{
		{"deny-all denies", false, nil, gpu0, Read, false, ""},
		{"allow exact", false, []string{"allow c 195:0 rw"}, gpu0, Read | Write, true, "c 195:0 rw\n"},
		{"allow covers subset only", false, []string{"allow c 195:0 r"}, gpu0, Read | Write, false, "c 195:0 r\n"},
		{"other minor", false, []string{"allow c 195:0 rw"}, gpu1, Read, false, "c 195:0 rw\n"},
		{"bits merge", false, []string{"allow c 195:0 r", "allow c 195:0 w"}, gpu0, Read | Write, true, "c 195:0 rw\n"},
		{"deny removes bits", false, []string{"allow c 195:0 rwm", "deny c 195:0 w"}, gpu0, Write, false, "c 195:0 rm\n"},
		{"deny removes entry", false, []string{"allow c 195:0 rw", "deny c 195:0 rwm"}, gpu0, Read, false, ""},
		{"no hole in wildcard", false, []string{"allow c 195:* rw", "deny c 195:1 rw"}, gpu1, Read, true, "c 195:* rw\n"},
		{"wildcard minor", false, []string{"allow c 195:* rw"}, gpu1, Read, true, "c 195:* rw\n"},
		{"a resets to allow", false, []string{"allow c 195:0 rw", "allow a"}, null, PermsAll, true, "a *:* rwm\n"},
		{"a resets to deny", true, []string{"deny c 1:3 w", "deny a *:* rwm", "allow c 1:3 rwm"}, gpu0, Read, false, "c 1:3 rwm\n"},
		{"allow-all denies exception", true, []string{"deny c 195:1 w"}, gpu1, Read | Write, false, "a *:* rwm\n"},
		{"allow-all partial overlap only", true, []string{"deny c 195:1 w"}, gpu1, Read, true, "a *:* rwm\n"},
		{"allow-all allow removes deny", true, []string{"deny c 195:1 rw", "allow c 195:1 rw"}, gpu1, Read, true, "a *:* rwm\n"},
		{"block is not char", false, []string{"allow b 195:0 rw"}, gpu0, Read, false, "b 195:0 rw\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEmulator(tc.from)
			write(t, e, tc.writes...)
			if got := e.Allows(tc.dev, tc.perms); got != tc.want {
				t.Fatalf("Allows(%s, %s) = %v, want %v", tc.dev, tc.perms, got, tc.want)
			}
			if got := e.List(); got != tc.list {
				t.Fatalf("List = %q, want %q", got, tc.list)
			}
		})
	}
}

func TestParseList(t *testing.T) {
	e, known, err := ParseList("c 1:3 rwm\nc *:* m\nb *:* m\nc 195:0 rw\n")
	if err != nil || !known {
		t.Fatalf("ParseList: %v known=%v", err, known)
	}
	if !e.Allows(Device{TypeChar, 195, 0}, Read|Write) || e.Allows(Device{TypeChar, 195, 1}, Read) ||
		!e.Allows(Device{TypeChar, 195, 1}, Mknod) {
		t.Fatalf("wrong state %q", e.List())
	}
	e, known, err = ParseList("a *:* rwm\n")
	if err != nil || known || !e.DefaultAllow() {
		t.Fatalf("allow-all: %v known=%v", err, known)
	}
	for _, bad := range []string{"a *:* rw\n", "c 1:3 rwm\na *:* rwm\n", "a *:* rwm\nc 1:3 rwm\n", "c 1:3\n", "garbage"} {
		if _, _, err := ParseList(bad); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("ParseList(%q) err = %v", bad, err)
		}
	}
}

func randomRule(rng *rand.Rand) Rule {
	types := []Type{TypeChar, TypeChar, TypeBlock, TypeAll}
	num := func() int64 {
		if rng.IntN(4) == 0 {
			return Wildcard
		}
		return int64(rng.IntN(3))
	}
	return Rule{Type: types[rng.IntN(len(types))], Major: num(), Minor: num(),
		Perms: Perms(1 + rng.IntN(7)), Allow: rng.IntN(2) == 0}
}

func randomEmulator(rng *rand.Rand, n int) *Emulator {
	e := NewEmulator(rng.IntN(3) == 0)
	for range n {
		r := randomRule(rng)
		if r.Type == TypeAll && rng.IntN(3) != 0 {
			continue // resets are rare in real lists
		}
		if err := e.Apply(r); err != nil {
			panic(err)
		}
	}
	return e
}

func forEachAccess(fn func(Device, Perms)) {
	for _, ty := range []Type{TypeChar, TypeBlock} {
		for major := uint32(0); major < 4; major++ {
			for minor := uint32(0); minor < 4; minor++ {
				for p := Perms(1); p <= PermsAll; p++ {
					fn(Device{ty, major, minor}, p)
				}
			}
		}
	}
}

// FuzzParseList: never panics; an accepted list renders back to a list that
// parses to the same state.
func FuzzParseList(f *testing.F) {
	f.Add("c 1:3 rwm\nc *:* m\n")
	f.Add("a *:* rwm\n")
	f.Add("c 195:0 rw\nc 195:0 m\n")
	f.Add("b 8:* m\nc 136:* rwm\n")
	f.Fuzz(func(t *testing.T, s string) {
		e, _, err := ParseList(s)
		if err != nil {
			return
		}
		again, _, err := ParseList(e.List())
		if err != nil || !again.Equal(e) {
			t.Fatalf("round trip of %q -> %q: %v", s, e.List(), err)
		}
	})
}
