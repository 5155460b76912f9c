package groupstate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// A state file is never seen half made: a reader that writes a limit (as the
// daemon does while the groups manager makes a group's file) finds it missing
// or complete, never empty or without its magic (it logged "bad group state
// file: too short" before Create linked a complete file into place).
func TestCreateNeverSeenHalfMade(t *testing.T) {
	dir := t.TempDir()
	const files = 300
	var current atomic.Int64
	current.Store(-1)
	done := make(chan error, 1)
	go func() {
		defer close(done)
		for i := range files {
			current.Store(int64(i))
			if err := Create("/proc", filepath.Join(dir, fmt.Sprint(i)), "g"); err != nil {
				done <- err
				return
			}
		}
	}()
	seen, complete := 0, 0
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		default:
		}
		i := current.Load() + 1 // the file being made next, or soon
		err := SetHeaderLimit(filepath.Join(dir, fmt.Sprint(i)), 1<<20, LockWait)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			t.Fatalf("file %d: %v (want missing or complete)", i, err)
		default:
			complete++
		}
		seen++
	}
	t.Logf("%d reads while %d files were made, %d found complete", seen, files, complete)
	for i := range files {
		if limit, set, err := HeaderLimit(filepath.Join(dir, fmt.Sprint(i))); err != nil || set && limit != 1<<20 {
			t.Fatalf("file %d: limit %d set %v: %v", i, limit, set, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// A file a member is still making (empty, or no magic yet) is ErrIncomplete to
// readers, not ErrBad; Create fills an empty one.
func TestIncompleteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := SetHeaderLimit(path, 1, LockWait); !errors.Is(err, ErrIncomplete) || errors.Is(err, ErrBad) {
		t.Fatalf("SetHeaderLimit on an empty file: %v, want ErrIncomplete", err)
	}
	if err := os.WriteFile(path, make([]byte, FileSize), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMemory(path); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("ReadMemory without magic: %v, want ErrIncomplete", err)
	}
	if err := Create("/proc", path, "g"); err != nil {
		t.Fatal(err)
	}
	if err := SetHeaderLimit(path, 1, LockWait); err != nil {
		t.Fatalf("after Create: %v", err)
	}
}
