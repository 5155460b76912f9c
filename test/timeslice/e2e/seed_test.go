//go:build timeslicee2e

package timeslicee2e

import (
	"encoding/binary"
	"os"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/groupstate/groupstatetest"
	"github.com/gpuslice/gpuslice/internal/timeslice"
)

// writeU32 writes v at off of a state file, as a member may.
func writeU32(t *testing.T, path string, off int, v uint32) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := f.WriteAt(binary.LittleEndian.AppendUint32(nil, v), int64(off)); err != nil {
		t.Fatal(err)
	}
}

// measuredGroup makes a group whose state file has one GPU slot where its
// members measured a context of kib (1 + KiB, as the library writes it).
func measuredGroup(t *testing.T, cfg timeslice.Config, name string, kib uint32) {
	t.Helper()
	setGroup(t, cfg, name, group.Change{File: "memory.max", Value: "1GiB"})
	state := groupstate.Path(cfg.RunDir, name)
	groupstatetest.WriteSlot(t, state, "GPU-0000", 0)
	writeU32(t, state, groupstate.OffContextKiB, kib)
}

// waitSeed waits until the state file of group name holds the context seed
// want (1 + KiB), for at most 5 s.
func waitSeed(t *testing.T, cfg timeslice.Config, name string, want uint32) {
	t.Helper()
	state := groupstate.Path(cfg.RunDir, name)
	var got uint32
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(state); err == nil && len(b) >= groupstate.HeaderSize {
			got = binary.LittleEndian.Uint32(b[groupstate.OffSeed:])
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s: context seed %d (1 + KiB), want %d", name, got, want)
		}
	}
}

// TestContextSeed (issue 36): a new group's state file is given the largest
// context another group measured on the node, so its first contexts are
// reserved at that size, not the 512 MiB guess. A group's members write its
// measurement: one that says less (1 KiB) lowers no one's seed below what
// another group measured, one that says more (4 TiB) raises it no further
// than the guess. A daemon started again finds the seed in the groups' files.
func TestContextSeed(t *testing.T) {
	cfg := testCfg(t)
	measuredGroup(t, cfg, "measured", 300<<10+1) // 300 MiB
	measuredGroup(t, cfg, "low", 2)              // 1 KiB: a lie, or a small context
	stop := startDaemonCtx(t, t.Context(), cfg)
	setGroup(t, cfg, "fresh", group.Change{File: "memory.max", Value: "1GiB"})
	if err := groupstate.Create("/proc", groupstate.Path(cfg.RunDir, "fresh"), "fresh"); err != nil {
		t.Fatal(err)
	}
	waitSeed(t, cfg, "fresh", 300<<10+1)
	waitSeed(t, cfg, "low", 300<<10+1)
	measuredGroup(t, cfg, "high", ^uint32(0))
	waitSeed(t, cfg, "fresh", groupstate.SeedMaxKiB)
	stop()
	setGroup(t, cfg, "later", group.Change{File: "memory.max", Value: "1GiB"})
	if err := groupstate.Create("/proc", groupstate.Path(cfg.RunDir, "later"), "later"); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, cfg)
	waitSeed(t, cfg, "later", groupstate.SeedMaxKiB)
}
