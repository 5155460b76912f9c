package elastic

import (
	"strings"
	"testing"
	"time"
)

const gib = uint64(1) << 30

var t0 = time.Unix(1000, 0)

func cfg() Config { return Config{Reserve: 0, Hold: time.Second, ReclaimWait: 5 * time.Second} }

// three groups 6/6/6 GiB guarantees, 20 GiB ceilings, on a 24 GiB GPU.
func three(spill bool) *Ledger {
	l := NewLedger(cfg(), 24*gib)
	for _, n := range []string{"a", "b", "c"} {
		l.Set(n, Settings{Min: 6 * gib, Max: 20 * gib, Spill: spill})
	}
	return l
}

func TestBorrow(t *testing.T) {
	cases := []struct {
		name    string
		spill   bool
		used    map[string]uint64
		group   string
		size    uint64
		granted uint64
		refused string
	}{
		{"within the allowance: nothing to lend", false, map[string]uint64{"a": 2 * gib}, "a", 4 * gib, 0, ""},
		{"free and no guarantee needs it", false, map[string]uint64{"a": 6 * gib}, "a", 6 * gib, 6 * gib, ""},
		{"the others' guarantees keep 12 GiB", false, map[string]uint64{"a": 6 * gib}, "a", 13 * gib, 0, "kept for guarantees"},
		{"guarantees met: the rest is free", false, map[string]uint64{"a": 6 * gib, "b": 6 * gib, "c": 6 * gib}, "a", 6 * gib, 6 * gib, ""},
		{"card full", false, map[string]uint64{"a": 6 * gib, "b": 6 * gib, "c": 12 * gib}, "a", 1 * gib, 0, "0 B free"},
		{"past the ceiling", false, map[string]uint64{"a": 6 * gib}, "a", 15 * gib, 0, "past the ceiling"},
		{"spillable: lent from guaranteed room", true, map[string]uint64{"a": 6 * gib}, "a", 14 * gib, 14 * gib, ""},
		{"crossing min counts its own part", false, map[string]uint64{"a": 4 * gib}, "a", 8 * gib, 6 * gib, ""},
		{"crossing min: too much", false, map[string]uint64{"a": 4 * gib}, "a", 9 * gib, 0, "20.0 GiB free"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := three(c.spill)
			for n, u := range c.used {
				l.Observe(n, Usage{Used: u})
			}
			d := l.Borrow(c.group, c.size, t0)
			if d.Granted != c.granted || (c.refused == "") != (d.Refused == "") || !strings.Contains(d.Refused, c.refused) {
				t.Fatalf("Borrow = %+v; want granted %d, refused containing %q", d, c.granted, c.refused)
			}
			if c.used[c.group]+c.size <= d.Allowance != (d.Refused == "") {
				t.Fatalf("allowance %d does not match the decision %+v", d.Allowance, d)
			}
		})
	}
}

func TestLentGoesBackAfterHold(t *testing.T) {
	l := three(false)
	l.Observe("a", Usage{Used: 6 * gib})
	if d := l.Borrow("a", 4*gib, t0); d.Granted != 4*gib {
		t.Fatalf("grant %+v", d)
	}
	if f := l.Free(); f != 14*gib { // lent counts as used before it is allocated
		t.Fatalf("free %d, want 14 GiB", f)
	}
	l.Observe("a", Usage{Used: 8 * gib}) // allocated only half of it
	l.Tick(t0.Add(999 * time.Millisecond))
	if a := l.Allowance("a"); a != 10*gib {
		t.Fatalf("allowance within hold %d, want 10 GiB", a)
	}
	l.Tick(t0.Add(time.Second))
	if a := l.Allowance("a"); a != 8*gib {
		t.Fatalf("allowance after hold %d, want 8 GiB", a)
	}
}

func TestReclaimSpillsLargestFirst(t *testing.T) {
	l := three(true)
	l.Set("c", Settings{Min: 6 * gib, Max: 6 * gib})
	l.Observe("a", Usage{Used: 14 * gib, Managed: 8 * gib})
	l.Observe("b", Usage{Used: 10 * gib, Managed: 4 * gib})
	p := l.Reclaim("c", 4*gib, t0)
	if len(p.Spill) != 1 || p.Spill[0] != (Order{"a", 4 * gib}) || p.Short != 0 {
		t.Fatalf("plan %+v", p)
	}
	// The reclaimed room is not lent again while c allocates.
	l.Observe("a", Usage{Used: 14 * gib, Managed: 8 * gib, Spilled: 4 * gib})
	if d := l.Borrow("b", 1*gib, t0.Add(time.Millisecond)); d.Granted != 0 {
		t.Fatalf("borrow during a reclaim granted: %+v", d)
	}
	l.Settle("c")
	if d := l.Borrow("b", 1*gib, t0.Add(2*time.Millisecond)); d.Granted != 1*gib {
		t.Fatalf("borrow after settle: %+v", d)
	}
}

func TestReclaimWithoutSpillWaits(t *testing.T) {
	l := three(false)
	l.Observe("a", Usage{Used: 14 * gib})
	l.Observe("b", Usage{Used: 6 * gib})
	l.ObserveDevice(24 * gib) // someone outside the groups holds 4 GiB
	p := l.Reclaim("c", 4*gib, t0)
	if len(p.Spill) != 0 || p.Short != 4*gib {
		t.Fatalf("plan %+v", p)
	}
}

func TestAvailable(t *testing.T) {
	l := three(false)
	l.Observe("a", Usage{Used: 6 * gib})
	if a := l.Available("a", t0); a != 12*gib {
		t.Fatalf("available %d, want 12 GiB (24 - 12 for b and c)", a)
	}
	if a := l.Available("b", t0); a != 12*gib {
		t.Fatalf("available %d, want 12 GiB (its 6 and 6 not needed by c)", a)
	}
	l.Observe("b", Usage{Used: 6 * gib})
	l.Observe("c", Usage{Used: 6 * gib})
	if a := l.Available("a", t0); a != 12*gib {
		t.Fatalf("available %d, want 12 GiB", a)
	}
}

func TestSnapshot(t *testing.T) {
	l := three(true)
	l.Observe("a", Usage{Used: 10 * gib, Managed: 4 * gib, Spilled: 2 * gib})
	s := l.Snapshot()
	if len(s) != 3 || s[0].Name != "a" || s[0].Borrowed != 2*gib || s[0].Guaranteed != 6*gib || s[0].Spilled != 2*gib {
		t.Fatalf("snapshot %+v", s)
	}
}
