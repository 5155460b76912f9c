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
func TestSMIInsideGroupShowsOnlyItsOwn(t *testing.T) {
	bin := binDir(t)
	environ := env(t)
	outsider := exec.Command(filepath.Join(bin, "gpuslice"), "run", "--", filepath.Join(bin, "gs-memfill"), "--max", "2GiB", "--hold-ms", "4000")
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
	script := filepath.Join(bin, "gs-memfill") + " --max 300MiB --hold-ms 3000 >/dev/null & echo member=$!; sleep 0.7; " + filepath.Join(bin, "gpuslice") + " smi; wait"
	r := run(t, environ, filepath.Join(bin, "gpuslice"), "run", "--memory", "1GiB", "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	member := ""
	for _, line := range strings.Split(r.stdout, "\n") {
		if v, ok := strings.CutPrefix(line, "member="); ok {
			member = v
		}
	}
	if !strings.Contains(r.stdout, "300.0 MiB / 1.0 GiB") {
		t.Errorf("memory not virtualized (want 300.0 MiB / 1.0 GiB):\n%s", r.stdout)
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
	if strings.Contains(procs[1], "2.0 GiB") {
		t.Errorf("the other group's process is listed:\n%s", r.stdout)
	}
}
