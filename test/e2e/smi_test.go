package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Inside a group, NVML shows the limit as the total and lists only the
// group's processes; a process of another group on the same GPU is hidden.
// The member's context counts in the group's use, in NVML's figures and the
// group's memory.current (the simulator's default 300 MiB beside its 300 MiB
// of allocations).
func TestSMIInsideGroupShowsOnlyItsOwn(t *testing.T) {
	bin := binDir(t)
	environ := env(t)
	outsider := exec.Command(filepath.Join(bin, "gpuslice"), "run", "--", filepath.Join(bin, "gs-memfill"), "--max", "2GiB", "--hold-ms", "6000")
	outsider.Env = environ
	if err := outsider.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := outsider.Wait(); err != nil {
			t.Errorf("outsider: %v", err)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	gs := filepath.Join(bin, "gpuslice")
	// memory.current is the daemon's read-back, refreshed within a second: the last value read while the
	// member holds its memory, once it has come to what the member holds.
	current := `for i in $(seq 37); do c=$(` + gs + ` group get smi memory.current); [ "$c" = "memory.current 629145600" ] && break; sleep 0.1; done; echo "$c"`
	script := filepath.Join(bin, "gs-memfill") + " --max 300MiB --hold-ms 5000 >/dev/null & echo member=$!; " + current + "; " + gs + " smi; wait"
	r := run(t, environ, gs, "run", "--group", "smi", "--memory", "1GiB", "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	member := ""
	for _, line := range strings.Split(r.stdout, "\n") {
		if v, ok := strings.CutPrefix(line, "member="); ok {
			member = v
		}
	}
	if !strings.Contains(r.stdout, "600.0 MiB / 1.0 GiB") {
		t.Errorf("memory not virtualized, or the member's context not counted (want 600.0 MiB / 1.0 GiB):\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "memory.current 629145600\n") {
		t.Errorf("the group's memory.current should be the member's 300 MiB and its context's 300 MiB (629145600):\n%s", r.stdout)
	}
	procs := strings.SplitN(r.stdout, "GPU  PID", 2)
	if len(procs) != 2 {
		t.Fatalf("no process table:\n%s", r.stdout)
	}
	fields := strings.Fields(procs[1])
	// memory column header, then one row: GPU PID size unit
	if len(fields) != 5 || fields[2] != member || fields[1] != "0" {
		t.Errorf("process table should list only the member %s:\n%s", member, r.stdout)
	}
	if strings.Contains(procs[1], "2.3 GiB") { // the outsider: 2 GiB and its context
		t.Errorf("the other group's process is listed:\n%s", r.stdout)
	}
}
