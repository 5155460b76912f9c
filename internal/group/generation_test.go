package group

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
		first, second := createBumpTwice(t, tr, "g")
		if first <= last {
			t.Fatalf("made for the %d. time: first generation %d, want above the removed group's %d", i+1, first, last)
		}
		last = second
		if err := tr.Remove("g"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFirstGeneration(t *testing.T) {
	for _, c := range []struct {
		now  time.Time
		want uint64
	}{
		{time.Unix(0, 0), 1},
		{time.Unix(-5, 0), 1},
		{time.Unix(0, 7), 7},
		{time.Unix(1_800_000_000, 5), 1_800_000_000_000_000_005},
	} {
		if got := firstGeneration(c.now); got != c.want {
			t.Errorf("firstGeneration(%v) = %d, want %d", c.now, got, c.want)
		}
	}
}

// createBumpTwice makes group name and numbers its settings twice: the first
// and second generations (the second the first plus one).
func createBumpTwice(t *testing.T, tr Tree, name string) (first, second uint64) {
	t.Helper()
	if err := tr.Create(name); err != nil {
		t.Fatal(err)
	}
	first, err := tr.Bump(name)
	if err != nil {
		t.Fatal(err)
	}
	if second, err = tr.Bump(name); err != nil || second != first+1 {
		t.Fatalf("second generation %d %v, want %d", second, err, first+1)
	}
	return first, second
}

// TestBumpNotHeldByTreeLock: anyone can open the group tree's directory
// (0755) and flock it: numbering a group's settings takes no lock but its own
// directory's, so a lock held on the tree for ever holds up no Bump. With a
// tree-wide floor under a lock on the tree (9a62846), Bump waited for good.
func TestBumpNotHeldByTreeLock(t *testing.T) {
	tr := NewTree(t.TempDir())
	if err := tr.Create("g"); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(tr.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := tr.Bump("g"); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Bump still waiting after 5 s on a lock another process holds on the group tree")
	}
}

// TestWriteFileAtRemadeDir: a file written into a group's directory opened
// before (the time-slice daemon's acknowledgement) lands only there: after
// the group is removed and made again under the same name, the write fails
// and the new directory has no such file.
func TestWriteFileAtRemadeDir(t *testing.T) {
	tr := NewTree(t.TempDir())
	if err := tr.Create("g"); err != nil {
		t.Fatal(err)
	}
	d, err := tr.OpenDir("g")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	if err := tr.WriteFileAt(d, "g", FileApplied, "5\n"); err != nil {
		t.Fatal(err)
	}
	if n, err := tr.Applied("g"); err != nil || n != 5 {
		t.Fatalf("applied %d %v, want 5", n, err)
	}
	if err := tr.Remove("g"); err != nil {
		t.Fatal(err)
	}
	if err := tr.Create("g"); err != nil {
		t.Fatal(err)
	}
	if err := tr.WriteFileAt(d, "g", FileApplied, "6\n"); err == nil {
		t.Fatal("a write into the removed directory succeeded")
	}
	if _, err := tr.Applied("g"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the remade group has %s (%v): want none", FileApplied, err)
	}
}

// TestWriteFileAtOverDir (review finding 2b): a directory the group's owner
// made where FileApplied belongs does not make every acknowledgement fail
// (EISDIR): it is removed, with what it holds, and the file written.
func TestWriteFileAtOverDir(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(p string) error
	}{
		{"empty", func(p string) error { return os.Mkdir(p, 0o755) }},
		{"holding files", func(p string) error {
			return errors.Join(os.MkdirAll(filepath.Join(p, "sub"), 0o755), os.WriteFile(filepath.Join(p, "sub", "x"), []byte("x"), 0o644))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTree(t.TempDir())
			if err := tr.Create("g"); err != nil {
				t.Fatal(err)
			}
			d, err := tr.OpenDir("g")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = d.Close() }()
			if err := tc.make(filepath.Join(tr.Path("g"), FileApplied)); err != nil {
				t.Fatal(err)
			}
			if err := tr.WriteFileAt(d, "g", FileApplied, "7\n"); err != nil {
				t.Fatalf("write over a directory: %v", err)
			}
			if n, err := tr.Applied("g"); err != nil || n != 7 {
				t.Fatalf("applied %d %v, want 7", n, err)
			}
			ents, err := os.ReadDir(tr.Path("g"))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if e.Name() != FileApplied {
					t.Errorf("left in the group's directory: %s", e.Name())
				}
			}
		})
	}
}
