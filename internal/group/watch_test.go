package group

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
)

func TestWatch(t *testing.T) {
	tr := Tree{Dir: t.TempDir()}
	if _, err := tr.Set("old", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan string, 100)
	done := make(chan error, 1)
	go func() { done <- tr.Watch(ctx, func(n string) { seen <- n }) }()
	select { // reported at start
	case n := <-seen:
		if n != "old" {
			t.Fatalf("reported %s at the start, want old", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("old not reported at the start")
	}
	// upTo makes a new group (a mark) and returns what was reported before
	// its arrival: the watch reads one inotify queue in order, so every event
	// of a write made before the mark is reported before it, however late the
	// watching goroutine runs (a drain for a fixed time missed late ones).
	marks := 0
	upTo := func() []string {
		t.Helper()
		marks++
		mark := fmt.Sprintf("mark-%d", marks)
		if _, err := tr.Set(mark, nil); err != nil {
			t.Fatal(err)
		}
		var got []string
		for deadline := time.After(10 * time.Second); ; {
			select {
			case n := <-seen:
				if n == mark {
					return got
				}
				got = append(got, n)
			case <-deadline:
				t.Fatalf("%s not reported in 10 s; reported before it: %q", mark, got)
			}
		}
	}
	if _, err := tr.Set("new", nil); err != nil {
		t.Fatal(err)
	}
	if got := upTo(); !slices.Contains(got, "new") {
		t.Fatalf("a new group's arrival: reported %q, want new", got)
	}
	// A new group's directory arrives whole (renamed into the tree): its
	// later changes are seen too.
	if _, err := tr.Set("new", []Change{{FileSlice, "4ms"}}); err != nil {
		t.Fatal(err)
	}
	if got := upTo(); !slices.Contains(got, "new") {
		t.Fatalf("a change of the new group: reported %q, want new", got)
	}
	if _, err := tr.Set("old", []Change{{FileSlice, "3ms"}}); err != nil {
		t.Fatal(err)
	}
	if got := upTo(); !slices.Contains(got, "old") {
		t.Fatalf("a change of old: reported %q, want old", got)
	}
	// Read-back files do not count as changes.
	if err := tr.WriteFile("old", FileAchieved, "1\n"); err != nil {
		t.Fatal(err)
	}
	if got := upTo(); len(got) != 0 {
		t.Fatalf("a read-back write reported as changes of %q", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRemovedName: the name Remove renames a group's directory to is told
// from every other dotted name in the tree.
func TestRemovedName(t *testing.T) {
	for file, want := range map[string]string{
		".removing-lc-123":          "lc",
		".removing-run-4567-89":     "run-4567",
		".removing-a.b_c-1":         "a.b_c",
		".removing-lc-":             "",
		".removing-lc":              "",
		".removing--12":             "",
		".removing-Bad-12":          "",
		".removing-lc-12x":          "",
		".lc.new-12-34":             "",
		".slice.tmp-99":             "",
		"lc":                        "",
		".removing-" + "x/y" + "-1": "",
	} {
		got, ok := removedName(file)
		if got != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", file, got, ok, want)
		}
	}
}

// TestWatchRemoved: Remove is told apart from a group directory that just
// goes (rm -r): only the first calls removed.
func TestWatchRemoved(t *testing.T) {
	tr := Tree{Dir: t.TempDir()}
	for _, n := range []string{"owner", "lost"} {
		if _, err := tr.Set(n, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	removed, changed := make(chan string, 10), make(chan string, 10)
	done := make(chan error, 1)
	go func() { done <- tr.WatchRemoved(ctx, func(n string) { changed <- n }, func(n string) { removed <- n }) }()
	for range 2 { // each existing group is reported once its watch is in place
		select {
		case <-changed:
		case <-time.After(5 * time.Second):
			t.Fatal("the groups were not reported at the start")
		}
	}
	if err := errors.Join(os.RemoveAll(tr.Path("lost")), tr.Remove("owner")); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-removed:
		if n != "owner" {
			t.Fatalf("removed(%q), want owner", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Remove was not reported")
	}
	select {
	case n := <-removed:
		t.Fatalf("removed(%q) for a directory that was not removed by Remove", n)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
