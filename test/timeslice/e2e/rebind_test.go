//go:build timeslicee2e

package timeslicee2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/hotplug"
	"github.com/gpuslice/gpuslice/internal/timeslice"
)

// TestBindingAfterConnect: a container's process connects as soon as it
// starts, without GPUSLICE_GROUP_FILE (a group of its own); the node agent
// binds the container's group to its cgroup a moment later. The daemon then
// disconnects it (its gate connects again) and identifies every process of
// that cgroup by the binding, whatever its environment.
func TestBindingAfterConnect(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: puts clients in a cgroup of their own")
	}
	cg, key := testCgroup(t)
	cfg := testCfg(t)
	setGroup(t, cfg, "bound")
	startDaemon(t, cfg)
	inCgroup := func() *exec.Cmd {
		return exec.Command("sh", "-c", `echo $$ >"$1/cgroup.procs" && exec "$0" -test.run='^$'`, os.Args[0], cg)
	}
	early := startChildCmd(t, inCgroup(), cfg, "hold", "")
	early.expect(t, "granted", 10*time.Second)
	pid := early.cmd.Process.Pid
	mine := "pid-" + strconv.Itoa(pid)
	if n := members(t, cfg, mine); n != 1 {
		t.Fatalf("group %s has %d members, want the early client", mine, n)
	}
	entries, err := cgroups.ParseCgroupFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	if err := group.NewTree(cfg.RunDir).WriteFile("bound", group.FileCgroup, entries[key]+"\n"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); members(t, cfg, mine) != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the early client is still in group %s after its cgroup %s was bound to group bound", mine, entries[key])
		}
	}
	if l := startChildCmd(t, inCgroup(), cfg, "dial", "").expect(t, "dial", 10*time.Second); l != "dial ok bound" {
		t.Fatalf("a client of the bound cgroup: %q, want dial ok bound", l)
	}
}

// members counts a group's members in the daemon's latest status (on any GPU).
func members(t *testing.T, cfg timeslice.Config, name string) int {
	t.Helper()
	st := waitStatusSince(t, cfg, time.Now())
	n := 0
	for _, g := range st.GPUs {
		for _, e := range g.Groups {
			if e.Group == name {
				n += e.Members
			}
		}
	}
	return n
}

// testCgroup makes a cgroup of its own (v1 devices controller, else v2) and
// returns its directory and its hierarchy's key in /proc/<pid>/cgroup.
func testCgroup(t *testing.T) (string, string) {
	t.Helper()
	m, err := hotplug.FindMounts("/proc")
	if err != nil {
		t.Fatal(err)
	}
	root, key := m.V1Devices, "devices"
	if root == "" {
		root, key = m.V2, ""
	}
	dir := filepath.Join(root, "gpuslice-test-"+strconv.Itoa(os.Getpid())+"-"+strings.ReplaceAll(t.Name(), "/", "-"))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			err := os.Remove(dir) // its processes may still be exiting
			if err == nil || time.Now().After(deadline) {
				if err != nil {
					t.Errorf("remove test cgroup: %v", err)
				}
				return
			}
		}
	})
	return dir, key
}
