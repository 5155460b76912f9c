package group

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestGenerationAcrossRemake: a group removed and made again numbers its
// first settings above every generation its earlier directory had, so the
// time-slice daemon's late acknowledgement of the removed group's settings
// (written into the new directory) is never the new settings' number. With
// numbers restarting at 1, the groups manager's Create returned before its
// limit was applied (TestRemadeGroupApplied failed once in a CI rehearsal).
func TestGenerationAcrossRemake(t *testing.T) {
	tr := NewTree(t.TempDir())
	var last uint64
	for i := range 5 {
		first, second := createBumpTwice(t, tr, "g", time.Now)
		if first <= last {
			t.Fatalf("made for the %d. time: first generation %d, want above the removed group's %d", i+1, first, last)
		}
		last = second
		if err := tr.Remove("g"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGenerationClockSteppedBack: the wall clock stepped back (by a second,
// by a day) between a group's removal and its remake under the same name:
// the new directory's first generation is still above the removed one's last,
// which the daemon may acknowledge late into the new directory. Numbered by
// the clock alone (main before the tree's floor), the first number after the
// step was below the removed group's.
func TestGenerationClockSteppedBack(t *testing.T) {
	for _, back := range []time.Duration{time.Nanosecond, time.Second, 24 * time.Hour} {
		tr := NewTree(t.TempDir())
		clock := time.Unix(1_800_000_000, 0)
		now := func() time.Time { return clock }
		_, removedLast := createBumpTwice(t, tr, "g", now)
		if err := tr.Remove("g"); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(-back)
		first, _ := createBumpTwice(t, tr, "g", now)
		if first <= removedLast {
			t.Fatalf("clock stepped back %v: first generation %d after the remake, want above the removed group's %d",
				back, first, removedLast)
		}
	}
}

// TestGenerationFloorAcrossGroups: the floor is the tree's: another group's
// numbers raise it too, and a floor file that is not a number counts as none
// (the clock numbers then).
func TestGenerationFloorAcrossGroups(t *testing.T) {
	tr := NewTree(t.TempDir())
	clock := time.Unix(1_000, 0)
	now := func() time.Time { return clock }
	createBumpTwice(t, tr, "a", now)
	_, bLast := createBumpTwice(t, tr, "b", now)
	if got := tr.floor(); got != bLast {
		t.Fatalf("floor %d, want the last number made, %d", got, bLast)
	}
	clock = time.Unix(1, 0)
	if c, _ := createBumpTwice(t, tr, "c", now); c != bLast+1 {
		t.Fatalf("first generation %d after the clock went back, want the floor plus one, %d", c, bLast+1)
	}
	if err := os.WriteFile(filepath.Join(tr.Dir, fileGenerationFloor), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	clock = time.Unix(5_000, 0)
	if d, _ := createBumpTwice(t, tr, "d", now); d != uint64(clock.UnixNano()) {
		t.Fatalf("first generation %d with a bad floor file, want the clock's %d", d, clock.UnixNano())
	}
}

// TestGenerationOwnersNumber: a number at or above maxGeneration written
// into a group's file (its directory's owner can) is replaced like a bad one
// and does not raise the tree's floor: another group's numbers stay far from
// overflow.
func TestGenerationOwnersNumber(t *testing.T) {
	tr := NewTree(t.TempDir())
	now := func() time.Time { return time.Unix(1_000, 0) }
	createBumpTwice(t, tr, "a", now)
	floor := tr.floor()
	if err := tr.WriteFile("a", FileGeneration, "18446744073709551614\n"); err != nil {
		t.Fatal(err)
	}
	got, err := tr.bumpAt("a", now)
	if err != nil || got != floor+1 {
		t.Fatalf("bump over a huge number: %d %v, want the floor plus one, %d", got, err, floor+1)
	}
	if f := tr.floor(); f != floor+1 {
		t.Fatalf("floor %d, want %d", f, floor+1)
	}
}

// TestRestoreRaisesFloor: a group the daemon restores with its generation
// (its run directory was made again, the floor file lost with it) raises the
// floor, so its remake numbers above it whatever the clock says.
func TestRestoreRaisesFloor(t *testing.T) {
	tr := NewTree(t.TempDir())
	if err := tr.Restore("g", Settings{}, map[string]string{FileGeneration: "5000000\n"}, -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := tr.Remove("g"); err != nil {
		t.Fatal(err)
	}
	first, _ := createBumpTwice(t, tr, "g", func() time.Time { return time.Unix(0, 10) })
	if first != 5_000_001 {
		t.Fatalf("first generation %d after a restored group's 5000000, want 5000001", first)
	}
}

func TestFirstGeneration(t *testing.T) {
	for _, c := range []struct {
		now   time.Time
		floor uint64
		want  uint64
	}{
		{time.Unix(0, 0), 0, 1},
		{time.Unix(-5, 0), 0, 1},
		{time.Unix(0, 7), 0, 7},
		{time.Unix(0, 7), 7, 8},
		{time.Unix(0, 7), 3, 7},
		{time.Unix(-5, 0), 41, 42},
		{time.Unix(1_800_000_000, 5), 0, 1_800_000_000_000_000_005},
		{time.Unix(1_700_000_000, 0), 1_800_000_000_000_000_005, 1_800_000_000_000_000_006},
	} {
		if got := firstGeneration(c.now, c.floor); got != c.want {
			t.Errorf("firstGeneration(%v, %d) = %d, want %d", c.now, c.floor, got, c.want)
		}
	}
}

// createBumpTwice makes group name and numbers its settings twice by the
// clock now: the first and second generations (the second the first plus one).
func createBumpTwice(t *testing.T, tr Tree, name string, now func() time.Time) (first, second uint64) {
	t.Helper()
	if err := tr.Create(name); err != nil {
		t.Fatal(err)
	}
	first, err := tr.bumpAt(name, now)
	if err != nil {
		t.Fatal(err)
	}
	if second, err = tr.bumpAt(name, now); err != nil || second != first+1 {
		t.Fatalf("second generation %d %v, want %d", second, err, first+1)
	}
	return first, second
}
