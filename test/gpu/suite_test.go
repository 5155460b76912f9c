//go:build gpusuite

package gpu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testbin"
)

// suite is one run: where the binaries are, which driver, and the figures taken.
type suite struct {
	bin, runDir string
	sim         bool   // the simulated GPU (GPUSLICE_DRIVER=sim)
	device      string // GPU 0's name
	driver      string // driver version as NVML reports it
	memory      string // GPU 0's memory as `gpuslice smi` prints it
	rows        []row
	extraEnv    []string // added to env (the MIG check: its instance, and on the simulator its MIG GPU)
	note        string   // prefixed to the checks recorded (the MIG check: which instance)
	procList    string   // shell command listing GPU 0's processes through NVML (empty: gpuslice smi)
}

// row is one line of the summary table.
type row struct {
	area, check, figure string
	ok                  bool
}

func (s *suite) record(t *testing.T, area, check, figure string) {
	t.Helper()
	if s.note != "" {
		check = s.note + ": " + check
	}
	s.rows = append(s.rows, row{area: area, check: check, figure: figure, ok: !t.Failed()})
	t.Logf("%s / %s: %s", area, check, figure)
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	s := &suite{bin: testbin.Dir(t), runDir: runDir(t)}
	switch d := os.Getenv("GPUSLICE_DRIVER"); d {
	case "sim":
		s.sim = true
	case "", "auto", "real":
		if !realDriverPresent() {
			t.Fatalf("no NVIDIA driver found (libnvidia-ml.so.1 / libcuda.so.1): run `GPUSLICE_DRIVER=sim make test-gpu` for the simulated GPU")
		}
	default:
		t.Fatalf("GPUSLICE_DRIVER=%q: want real, auto or sim", d)
	}
	for _, f := range []string{"gpuslice", "libgpuslice.so", "gs-memfill", "gs-tenant", "gs-bench-hooks", "gs-trainer"} {
		if _, err := os.Stat(filepath.Join(s.bin, f)); err != nil {
			t.Fatalf("needs the build outputs (make test-gpu builds them): %v", err)
		}
	}
	s.inspect(t)
	return s
}

// runDir is the run directory of the time-slice daemon `gpuslice run` starts; the
// daemon stops when its directory is removed (it may write once more while it
// notices, so the removal is repeated until the directory stays gone).
func runDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpuslice-gpu-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.RemoveAll(dir)
			if _, serr := os.Stat(dir); err == nil && os.IsNotExist(serr) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("remove run directory %s: %v", dir, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return dir
}

// realDriverPresent: the loader can find the NVIDIA driver's libraries.
func realDriverPresent() bool {
	out, err := exec.Command("ldconfig", "-p").Output()
	if err == nil && bytes.Contains(out, []byte("libcuda.so.1")) && bytes.Contains(out, []byte("libnvidia-ml.so.1")) {
		return true
	}
	for _, d := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/nvidia/lib64"} {
		if _, err := os.Stat(filepath.Join(d, "libcuda.so.1")); err == nil {
			return true
		}
	}
	return false
}

// env is the environment of every program the suite starts: its own run
// directory (its own time-slice daemon), and on the simulator its own state file.
func (s *suite) env(extra ...string) []string {
	e := append(os.Environ(), "GPUSLICE_RUN_DIR="+s.runDir)
	if s.sim {
		e = append(e, "GPUSLICE_DRIVER=sim", "LD_LIBRARY_PATH="+filepath.Join(s.bin, "sim"),
			"GPUSLICE_SIM_STATE="+filepath.Join(s.runDir, "sim.state"), "GPUSLICE_SIM_MEMORY=24GiB")
	} else {
		e = append(e, "GPUSLICE_DRIVER=real")
	}
	return append(append(e, s.extraEnv...), extra...) // the last of a repeated variable counts
}

// cmd is a program of bin/ (or any path) with the suite's environment.
func (s *suite) cmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	if !strings.Contains(name, "/") {
		if _, err := os.Stat(filepath.Join(s.bin, name)); err == nil {
			name = filepath.Join(s.bin, name)
		}
	}
	c := exec.CommandContext(ctx, name, args...)
	c.Env = s.env()
	return c
}

// gpusliceRun is `gpuslice run FLAGS -- ARGV`.
func (s *suite) gpusliceRun(ctx context.Context, flags []string, argv ...string) *exec.Cmd {
	args := append(append([]string{"run"}, flags...), "--")
	for i, a := range argv {
		if i == 0 && !strings.Contains(a, "/") {
			if _, err := os.Stat(filepath.Join(s.bin, a)); err == nil {
				a = filepath.Join(s.bin, a)
			}
		}
		args = append(args, a)
	}
	return s.cmd(ctx, "gpuslice", args...)
}

// output runs c and returns stdout; a failure fails the test with stderr.
func output(t *testing.T, c *exec.Cmd) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(c.Args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

var smiGPU0 = regexp.MustCompile(`(?m)^0\s+(.+?)\s+(GPU-[0-9a-fA-F-]+)\s+(\S+ \S+) / (\S+ \S+)`)

// inspect reads the device name, memory and driver version as `gpuslice smi` shows them.
func (s *suite) inspect(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := output(t, s.cmd(ctx, "gpuslice", "smi"))
	if _, err := fmt.Sscanf(out, "driver %s", &s.driver); err != nil {
		t.Fatalf("gpuslice smi: no driver line: %v\n%s", err, out)
	}
	m := smiGPU0.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("gpuslice smi: no GPU 0 line:\n%s", out)
	}
	s.device, s.memory = strings.TrimSpace(m[1]), m[4]
}

// TestGPU runs every check in order and writes the report at the end.
func TestGPU(t *testing.T) {
	s := newSuite(t)
	t.Logf("device %s (%s), driver %s, simulated %v", s.device, s.memory, s.driver, s.sim)
	t.Run("Memory", s.testMemory)
	if !testing.Short() {
		t.Run("Time", s.testTime)
		t.Run("Engine", s.testEngine)
		t.Run("Overhead", s.testOverhead)
		t.Run("Demo", s.testDemo)
		t.Run("MPS", s.testMPS)
		t.Run("MIG", s.testMIG)
	}
	s.report(t)
}
