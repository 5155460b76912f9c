//go:build timeslicee2e

package timeslicee2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/identity"
)

// TestE2EHostPIDOnHello: a process of a pid namespace of its own that only
// allocates GPU memory (never launches) gets its host pid recorded in the
// group file: the library says hello at its first allocation and the daemon
// fills the entry from SO_PEERCRED and /proc/<pid>/status.
func TestE2EHostPIDOnHello(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs a process in a new pid namespace (unshare -p)")
	}
	e := setupE2E(t)
	cfg := testCfg(t)
	startDaemon(t, cfg)
	tree := group.NewTree(cfg.RunDir)
	if err := tree.Create("ns-test"); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(tree.Path("ns-test"), groupstate.FileName)
	if err := groupstate.Create("/proc", state, "ns-test"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", "--mount-proc", filepath.Join(e.bin, "gs-memfill"), "--max", "64M", "--hold-ms", "30000")
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+e.preload, "LD_LIBRARY_PATH="+e.sim, "GPUSLICE_GROUP_FILE="+state,
		"GPUSLICE_NODE_SOCKET="+cfg.Socket, "GPUSLICE_SIM_STATE="+filepath.Join(t.TempDir(), "sim.state"), "GPUSLICE_LOG=0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var procs []groupstate.Process
	deadline := time.Now().Add(10 * time.Second)
	for len(procs) == 0 || procs[0].HostPID == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no host pid recorded: %+v", procs)
		}
		time.Sleep(10 * time.Millisecond)
		procs, _ = groupstate.Processes(state)
	}
	p := procs[0]
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(int(p.HostPID)), "status"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.ParseNSpid(status)
	if err != nil || len(ids) != 2 || ids[0] != p.HostPID || ids[1] != p.PID || p.PID != 1 {
		t.Fatalf("entry %+v, NSpid of its host pid %v (%v): want the same process, pid 1 in its namespace", p, ids, err)
	}
	if !strings.Contains(string(status), "gs-memfill") {
		t.Fatalf("host pid %d is not gs-memfill:\n%s", p.HostPID, status)
	}
}
