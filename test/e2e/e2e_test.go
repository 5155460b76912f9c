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

const (
	gib = 1 << 30
	mib = 1 << 20
	// simContext is what each context takes on the simulated GPU by default (simgpu/src/config.h,
	// GPUSLICE_SIM_CONTEXT_MEMORY unset here), as a real card's context takes a few hundred MiB.
	simContext = 300 * mib
)

// noContextMemory is for a test of something else whose figures fill the simulated card exactly:
// contexts take nothing.
const noContextMemory = "GPUSLICE_SIM_CONTEXT_MEMORY=0"

// simulated says whether gpuslice run fell back to the simulated GPU (exact figures hold there only).
func simulated(r result) bool {
	return strings.Contains(r.stderr, "using the simulated GPU")
}

// contextCounted checks that what the process's context holds counts against the group: the program
// sees less free than its quota at the start (on the simulator, exactly the default context memory).
func contextCounted(t *testing.T, r result, f fill) {
	t.Helper()
	held := f.Total - f.Free
	if f.Free > f.Total || held == 0 {
		t.Errorf("%s: free %d of total %d at the start: the context's own memory was not counted", f.Path, f.Free, f.Total)
	} else if simulated(r) && held != simContext {
		t.Errorf("%s: the context holds %d MiB of the group's quota, want the simulator's default %d MiB", f.Path, held/mib, simContext/mib)
	}
}

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
			contextCounted(t, r, f)
			if f.StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" || f.Allocated > f.Free || f.Allocated+48*mib <= f.Free {
				t.Errorf("allocated %d, stopped by %s; want OOM just under the %d free beside the context", f.Allocated, f.StoppedBy, f.Free)
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
			if f.Total != 512*mib {
				t.Errorf("%s: total %d, want the 512 MiB quota", path, f.Total)
			}
			contextCounted(t, r, f)
			if f.StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" || f.Allocated > f.Free || f.Allocated+32*mib <= f.Free {
				t.Errorf("%s: allocated %d MiB, stopped by %s; want OOM at the 512 MiB limit, less the context (%d MiB free)",
					path, f.Allocated/mib, f.StoppedBy, f.Free/mib)
			}
		})
	}
}

// Two processes of one group share its limit, their contexts included: the second sees free what the
// first's allocations and both contexts left.
func TestTwoProcessesShareOneLimit(t *testing.T) {
	bin := binDir(t)
	fillCmd := filepath.Join(bin, "gs-memfill")
	script := fillCmd + " --chunk 64MiB --max 700MiB --hold-ms 2000 & sleep 0.5; " + fillCmd + " --chunk 64MiB; wait"
	r := run(t, env(t), filepath.Join(bin, "gpuslice"), "run", "--memory", "2GiB", "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	fills := parseFills(t, r.stdout)
	if len(fills) != 2 {
		t.Fatalf("want 2 results, got %d: %s", len(fills), r.stdout)
	}
	first, second := fills[0], fills[1]
	if first.Allocated != 700*mib {
		first, second = second, first
	}
	held := first.Total - first.Free // one context, as the first process saw it at its start
	sum := first.Allocated + second.Allocated
	if first.Allocated != 700*mib || sum+2*held > 2*gib {
		t.Fatalf("two processes of one group got %d and %d bytes beside two contexts of %d, over the 2 GiB limit",
			first.Allocated, second.Allocated, held)
	}
	if simulated(r) && held != simContext {
		t.Errorf("the first context holds %d MiB, want the simulator's default %d MiB", held/mib, simContext/mib)
	}
	if second.StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" || second.Free > 2*gib-700*mib-2*held || sum+2*held+64*mib <= 2*gib {
		t.Fatalf("second process: %+v (sum %d); want it to see and get only what the first and both contexts left", second, sum)
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
