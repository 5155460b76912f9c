package e2e

import (
	"bufio"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
	// The outsider holds its 2 GiB until the test ends (SIGTERM, which gpuslice
	// run passes on), from before the group's process table is read: a sleep
	// there once stood for its allocation, and a 6 s hold could end first.
	outsider := exec.Command(filepath.Join(bin, "gpuslice"), "run", "--", filepath.Join(bin, "gs-memfill"), "--max", "2GiB", "--hold-ms", "600000")
	outsider.Env = environ
	out, err := outsider.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := outsider.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := outsider.Process.Signal(syscall.SIGTERM); err != nil {
			t.Errorf("stop the outsider: %v", err)
		}
		if err := outsider.Wait(); outsider.ProcessState.ExitCode() != 128+int(syscall.SIGTERM) {
			t.Errorf("outsider: %v, want it stopped by SIGTERM (gpuslice run exits 143 then)", err)
		}
	}()
	allocated := make(chan string, 1)
	go func() { // gs-memfill says what it holds, then holds it
		line, _ := bufio.NewReader(out).ReadString('\n')
		allocated <- line
		_, _ = io.Copy(io.Discard, out) //nolint:errcheck // nothing more is read
	}()
	select {
	case line := <-allocated:
		if !strings.Contains(line, `"allocated":2147483648`) {
			t.Fatalf("the outsider holds no 2 GiB: %q", line)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the outsider said nothing in 60 s")
	}
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
