package groupstate_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/groupstate/groupstatetest"
)

func TestMemoryState(t *testing.T) {
	path := filepath.Join(t.TempDir(), groupstate.FileName)
	groupstatetest.WriteSlot(t, path, "GPU-0000", 123)
	if n, err := groupstate.SetMemoryLimit(path, 2<<30); err != nil || n != 1 {
		t.Fatalf("set limit: %d %v", n, err)
	}
	got, err := groupstate.ReadMemory(path)
	if err != nil || len(got) != 1 || got[0] != (groupstate.GPUMemory{UUID: "GPU-0000", Limit: 2 << 30, Used: 123}) {
		t.Fatalf("read %+v %v", got, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.state")
	if err := os.WriteFile(bad, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(bad)
	if _, err := groupstate.SetMemoryLimit(bad, 1); err == nil {
		t.Fatal("limit written into a file without the magic")
	}
	if after, _ := os.ReadFile(bad); string(after) != string(before) {
		t.Fatal("a bad file was changed")
	}
	if _, err := groupstate.ReadMemory(bad); err == nil {
		t.Fatal("bad file read")
	}
}

// A state file truncated while the daemon has it mapped gives an error, not
// a crash of the daemon (SIGBUS on the mapping).
func TestGroupLimitTruncatedStateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), groupstate.FileName)
	if err := groupstate.Create("/proc", path, "g"); err != nil {
		t.Fatal(err)
	}
	s, err := groupstate.Open(path, false, groupstate.LockWait)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	walk := func() (err error) {
		defer groupstate.GuardFault(&err)()
		s.Procs(func(int, groupstate.Process) bool { return true })
		return nil
	}
	if err := walk(); !errors.Is(err, groupstate.ErrTruncated) {
		t.Fatalf("walk of a truncated file: %v, want groupstate.ErrTruncated", err)
	}
	if err := s.Close(); err != nil { // drops its lock
		t.Fatal(err)
	}
	if _, err := groupstate.Processes(path); err == nil {
		t.Fatal("groupstate.Processes of an empty file succeeded")
	}
	if _, err := groupstate.SetLimit(path, 1, groupstate.LockWait); err == nil {
		t.Fatal("groupstate.SetLimit on an empty file succeeded")
	}
}
