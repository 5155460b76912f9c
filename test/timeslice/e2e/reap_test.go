//go:build timeslicee2e

package timeslicee2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/groupstate/groupstatetest"
	"github.com/gpuslice/gpuslice/internal/identity"
)

// The daemon releases a dead member's memory on its own, at its status
// refresh (every 250 ms by default): memory.current drops to what the live
// members hold without anyone allocating.
func TestGroupStateDaemonReapsDeadMembers(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "reap")
	state := filepath.Join(cfg.RunDir, "groups", "reap", groupstate.FileName)
	if err := groupstate.Create("/proc", state, "reap"); err != nil {
		t.Fatal(err)
	}
	start, ns := selfIdentity(t)
	groupstatetest.AddMember(t, state, 0, int32(os.Getpid()), start, ns, 4096)
	groupstatetest.AddMember(t, state, 1, groupstatetest.DeadPID(t), start, ns, 1<<30) // without the sweep: 1 GiB + 4096 for good
	began := time.Now()
	startDaemon(t, cfg)
	for deadline := began.Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cur, _ := group.NewTree(cfg.RunDir).ReadFile("reap", group.FileMemoryCurrent)
		if cur == "4096" {
			t.Logf("dead member's memory released %v after the daemon started (status refresh %v)",
				time.Since(began).Round(time.Millisecond), cfg.StatusEvery)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("memory.current = %q, want 4096", cur)
		}
	}
}

// selfIdentity is this process's start time and pid namespace.
func selfIdentity(t *testing.T) (start, ns uint64) {
	t.Helper()
	self, err := identity.Of("/proc", int32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	return self.Start, self.NS
}
