// Package e2e runs the built binaries (bin/) as a user would: gpuslice run with
// CUDA programs, on the real driver if present, else the simulated GPU.
package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testbin"
)

// binDir is where 'make' put the binaries; tests skip without them.
func binDir(t *testing.T) string {
	t.Helper()
	return testbin.Dir(t, "gpuslice", "libgpuslice.so", "gs-memfill", "gs-trainer", "sim/libcuda.so.1")
}

// env is a private simulated GPU (ignored by a real driver) and run directory.
func env(t *testing.T, extra ...string) []string {
	t.Helper()
	tmp := t.TempDir()
	base := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"GPUSLICE_SIM_STATE=" + filepath.Join(tmp, "sim.state"), "GPUSLICE_SIM_MEMORY=24GiB",
		"GPUSLICE_RUN_DIR=" + runDir(t),
	}
	return append(base, extra...)
}

// runDir is a run directory for the time-slice daemon that gpuslice run starts; the
// daemon stops when the directory is removed, so cleanup retries until it has.
func runDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpuslice-e2e-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var err error
		for i := 0; i < 50; i++ {
			if err = os.RemoveAll(dir); err == nil {
				if _, serr := os.Stat(dir); os.IsNotExist(serr) {
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("remove run directory: %v", err)
	})
	return dir
}

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, environ []string, name string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = environ, &out, &errb
	err := cmd.Run()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return result{code, out.String(), errb.String()}
}

type fill struct {
	Via         string `json:"via"`
	Path        string `json:"path"`
	Total       uint64 `json:"total"`
	Free        uint64 `json:"free"`
	DeviceTotal uint64 `json:"device_total"`
	Allocated   uint64 `json:"allocated"`
	StoppedBy   string `json:"stopped_by"`
}

func parseFills(t *testing.T, stdout string) []fill {
	t.Helper()
	var out []fill
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var f fill
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("bad gs-memfill line %q: %v", line, err)
		}
		out = append(out, f)
	}
	return out
}

const gib = 1 << 30

func TestMemoryLimitEveryLookupRoute(t *testing.T) {
	bin := binDir(t)
	for _, via := range []string{"dlsym", "procaddr", "procaddr_v2"} {
		t.Run(via, func(t *testing.T) {
			r := run(t, env(t), filepath.Join(bin, "gpuslice"), "run", "--memory", "1GiB", "--",
				filepath.Join(bin, "gs-memfill"), "--via", via, "--chunk", "48MiB")
			if r.code != 0 {
				t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
			}
			f := parseFills(t, r.stdout)[0]
			if f.Total != gib || f.DeviceTotal != gib {
				t.Errorf("total %d, device total %d; want exactly 1 GiB (%d)", f.Total, f.DeviceTotal, gib)
			}
			if f.StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" || f.Allocated > gib || f.Allocated < gib-48<<20 {
				t.Errorf("allocated %d, stopped by %s; want OOM just under 1 GiB", f.Allocated, f.StoppedBy)
			}
			if !strings.Contains(r.stderr, "gpuslice:") || !strings.Contains(r.stderr, "refused") {
				t.Errorf("no refusal message on stderr: %q", r.stderr)
			}
		})
	}
}

func TestMemoryLimitEveryAllocationPath(t *testing.T) {
	bin := binDir(t)
	for _, path := range []string{"alloc", "pitch", "managed", "async", "pool", "vmm", "array"} {
		t.Run(path, func(t *testing.T) {
			r := run(t, env(t), filepath.Join(bin, "gpuslice"), "run", "--memory", "512MiB", "--",
				filepath.Join(bin, "gs-memfill"), "--path", path, "--chunk", "32MiB")
			if r.code != 0 {
				t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
			}
			f := parseFills(t, r.stdout)[0]
			if f.StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" || f.Allocated > 512<<20 || f.Allocated < 512<<20-32<<20 {
				t.Errorf("%s: allocated %d MiB, stopped by %s; want OOM at the 512 MiB limit", path, f.Allocated>>20, f.StoppedBy)
			}
		})
	}
}

func TestTwoProcessesShareOneLimit(t *testing.T) {
	bin := binDir(t)
	fillCmd := filepath.Join(bin, "gs-memfill")
	script := fillCmd + " --chunk 64MiB --max 700MiB --hold-ms 2000 & sleep 0.5; " + fillCmd + " --chunk 64MiB; wait"
	r := run(t, env(t), filepath.Join(bin, "gpuslice"), "run", "--memory", "1GiB", "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	fills := parseFills(t, r.stdout)
	if len(fills) != 2 {
		t.Fatalf("want 2 results, got %d: %s", len(fills), r.stdout)
	}
	sum := fills[0].Allocated + fills[1].Allocated
	if sum > gib {
		t.Fatalf("two processes of one group got %d bytes together, over the 1 GiB limit", sum)
	}
	second := fills[1]
	if fills[0].Allocated < fills[1].Allocated {
		second = fills[0]
	}
	if second.StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" || second.Free > gib-700<<20 || sum < gib-64<<20 {
		t.Fatalf("second process: %+v (sum %d); want it to see and get only what the first left", second, sum)
	}
}

// A gpuslice run inside a run (a script the command starts, say) runs in the
// outer run's group: the limit holds for the command and every process it
// starts (the inner run made a group of its own, without a limit: 2 GiB under
// 1 GiB). A nested run asking for limits of its own is refused.
func TestNestedRunKeepsTheLimit(t *testing.T) {
	bin := binDir(t)
	gs := filepath.Join(bin, "gpuslice")
	inner := gs + " run -- " + filepath.Join(bin, "gs-memfill") + " --chunk 64MiB --max 2GiB"
	r := run(t, env(t), gs, "run", "--memory", "1GiB", "--", "sh", "-c", inner)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if f := parseFills(t, r.stdout)[0]; f.Allocated > gib || f.StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("a nested run allocated %d MiB (stopped by %s) under the outer 1 GiB limit", f.Allocated>>20, f.StoppedBy)
	}
	r = run(t, env(t), gs, "run", "--memory", "1GiB", "--", gs, "run", "--memory", "2GiB", "--", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "already in group") {
		t.Errorf("a nested run with its own --memory: exit %d, stderr %q; want 2, already in group", r.code, r.stderr)
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	bin := binDir(t)
	gs := filepath.Join(bin, "gpuslice")
	cases := [][]string{
		{"run", "--memory", "6XB", "--", "true"},
		{"run", "--memory", "64TiB", "--", "true"},
		{"run", "--gpu", "7", "--", "true"},
		{"run", "--nope", "--", "true"},
		{"run", "--memory", "1GiB"},
		{"run", "--group", "Bad/Name", "--", "true"},
	}
	for _, args := range cases {
		r := run(t, env(t), gs, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "gpuslice") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with a message", args, r.code, r.stderr)
		}
	}
}

func TestRunSaysSimulatedOnceAndPassesExitCode(t *testing.T) {
	bin := binDir(t)
	r := run(t, env(t, "GPUSLICE_DRIVER=sim"), filepath.Join(bin, "gpuslice"), "run", "--memory", "1GiB", "--", "sh", "-c", "exit 7")
	if r.code != 7 {
		t.Fatalf("exit %d, want the command's 7; stderr %q", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "using the simulated GPU"); n != 1 {
		t.Fatalf("stderr mentions the simulated GPU %d times, want once: %q", n, r.stderr)
	}
}
