//go:build timeslicee2e

package timeslicee2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/groupstate/groupstatetest"
)

// TestReliabilityLimitRestored: a member that writes a larger limit into its
// group's state file (mapped writable: the counts live there) has the group's
// memory.max put back at the next status refresh.
func TestReliabilityLimitRestored(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "mem", group.Change{File: "memory.max", Value: "3GiB"})
	state := filepath.Join(cfg.RunDir, "groups", "mem", groupstate.FileName)
	groupstatetest.WriteSlot(t, state, "GPU-0000", 4096)
	startDaemon(t, cfg)
	limit := func() uint64 {
		got, err := groupstate.ReadMemory(state)
		if err != nil || len(got) != 1 {
			t.Fatalf("read %s: %+v %v", state, got, err)
		}
		return got[0].Limit
	}
	waitLimit := func(want uint64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); limit() != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("limit %d, want %d", limit(), want)
			}
		}
	}
	waitLimit(3 << 30)
	if _, err := groupstate.SetMemoryLimit(state, 0); err != nil { // what a member could write: no limit
		t.Fatal(err)
	}
	waitLimit(3 << 30)
	// The header's limit (what a slot claimed later takes), written by
	// anything but the daemon (a member, an old CLI or agent): put back too.
	if err := groupstate.SetHeaderLimit(state, 8<<30, groupstate.LockWait); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if lim, set, err := groupstate.HeaderLimit(state); err == nil && set && lim == 3<<30 {
			break
		}
		if time.Now().After(deadline) {
			lim, set, err := groupstate.HeaderLimit(state)
			t.Fatalf("header limit %d (set %v, %v), want 3 GiB put back", lim, set, err)
		}
	}
}

// A new memory.max reaches the running processes' group state file, and the
// group's use shows in memory.current.
func TestMemoryLimitAppliesLive(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "mem")
	state := filepath.Join(cfg.RunDir, "groups", "mem", groupstate.FileName)
	groupstatetest.WriteSlot(t, state, "GPU-0000", 4096)
	startDaemon(t, cfg)
	setGroup(t, cfg, "mem", group.Change{File: "memory.max", Value: "3GiB"})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := groupstate.ReadMemory(state)
		cur, _ := group.NewTree(cfg.RunDir).ReadFile("mem", group.FileMemoryCurrent)
		if err == nil && len(got) == 1 && got[0].Limit == 3<<30 && cur == "4096" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("limit not applied: %+v %v, memory.current %q", got, err, cur)
		}
	}
}
