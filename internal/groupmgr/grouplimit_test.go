package groupmgr

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// readGroupLimit returns the header's group limit and whether it is set.
func readGroupLimit(t *testing.T, path string) (uint64, bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != groupstate.FileSize {
		t.Fatalf("state file is %d bytes, want %d", len(b), groupstate.FileSize)
	}
	le := binary.LittleEndian
	return le.Uint64(b[groupstate.OffLimit:]), le.Uint32(b[groupstate.OffLimitSet:]) == 1
}

// The limit belongs to the group, and only the time-slice daemon writes it:
// `gpuslice run` prepares the group's state file (mode 0600) without a limit
// (a member then claims no slot before the daemon has applied the group's
// settings: internal/groupmgr waits for that); the daemon's writer puts the
// limit into the header and into the slots already claimed (members then take
// it whatever their own environment says; the library side is checked by
// libgpuslice's reliability_mem_test).
func TestGroupLimitWrittenByDaemonOnly(t *testing.T) {
	dir := t.TempDir()
	state := groupstate.Path(dir, "g")
	run := func(max uint64) {
		t.Helper()
		var changes []group.Change
		if max != 0 {
			changes = []group.Change{{File: group.FileMemoryMin, Value: "0"}, {File: group.FileMemorySpill, Value: "none"},
				{File: group.FileMemoryMax, Value: strconv.FormatUint(max, 10)}}
		}
		if _, err := group.NewTree(dir).Set("g", changes); err != nil {
			t.Fatal(err)
		}
		if err := createRunState(dir, "g", true); err != nil {
			t.Fatal(err)
		}
	}
	run(1 << 30)
	if lim, set := readGroupLimit(t, state); set || lim != 0 {
		t.Fatalf("the run wrote a group limit %d (set %v): only the daemon writes limits", lim, set)
	}
	if st, err := os.Stat(state); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode: %v %v", st, err)
	}
	if _, err := groupstate.SetLimit(state, 1<<30, groupstate.LockWait); err != nil { // the daemon applies memory.max
		t.Fatal(err)
	}
	// A member claimed a slot meanwhile (as the library does).
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	slot := b[groupstate.HeaderSize:]
	binary.LittleEndian.PutUint32(slot, groupstate.SlotReady)
	copy(slot[groupstate.GPUOffUUID:], "GPU-0000")
	binary.LittleEndian.PutUint64(slot[groupstate.GPUOffLimit:], 1<<30)
	if err := os.WriteFile(state, b, 0o600); err != nil {
		t.Fatal(err)
	}
	run(2 << 30)
	if lim, set := readGroupLimit(t, state); !set || lim != 1<<30 {
		t.Fatalf("a second run changed the group limit to %d (set %v)", lim, set)
	}
	if _, err := groupstate.SetLimit(state, 2<<30, groupstate.LockWait); err != nil {
		t.Fatal(err)
	}
	if lim, _ := readGroupLimit(t, state); lim != 2<<30 {
		t.Fatalf("group limit %d, want 2 GiB", lim)
	}
	got, err := groupstate.ReadMemory(state)
	if err != nil || len(got) != 1 || got[0].Limit != 2<<30 {
		t.Fatalf("claimed slot: %+v %v, want limit 2 GiB", got, err)
	}
	if _, err := groupstate.SetLimit(filepath.Join(dir, "missing"), 1, groupstate.LockWait); err == nil {
		t.Fatal("groupstate.SetLimit on a missing file succeeded")
	}
}
