package ctxprobe

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/groupstate"
)

func seed(mib, kib uint32) groupstate.DeviceSeed {
	return groupstate.DeviceSeed{TotalMiB: mib, KiB: kib}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      Result
		err       string
	}{
		{"none", "", Result{Devices: map[string]uint32{}}, ""},
		{"two kinds and a skip", "seed GPU-a 81559 524288000\nseed GPU-b 22491 188743680\nskip MIG-c a MIG device: not probed\n",
			Result{Seeds: []groupstate.DeviceSeed{seed(81559, 500<<10+1), seed(22491, 180<<10+1)},
				Devices: map[string]uint32{"GPU-a": 500<<10 + 1, "GPU-b": 180<<10 + 1},
				Skipped: []Skip{{"MIG-c", "a MIG device: not probed", false}}}, ""},
		{"one kind, the larger", "seed GPU-a 81559 2097152\nseed GPU-b 81559 524288000\n",
			Result{Seeds: []groupstate.DeviceSeed{seed(81559, 500<<10+1)},
				Devices: map[string]uint32{"GPU-a": 2<<10 + 1, "GPU-b": 500<<10 + 1}}, ""},
		{"rounded up", "seed GPU-a 100 1048577\n", Result{Seeds: []groupstate.DeviceSeed{seed(100, 1<<10+2)}, Devices: map[string]uint32{"GPU-a": 1<<10 + 2}}, ""},
		{"zero context", "seed GPU-a 81559 0\n", Result{Devices: map[string]uint32{},
			Skipped: []Skip{{"GPU-a", "implausible figure: a context of 0 bytes on a device of 81559 MiB", true}}}, ""},
		{"under 1 MiB", "seed GPU-a 81559 1048575\n", Result{Devices: map[string]uint32{},
			Skipped: []Skip{{"GPU-a", "implausible figure: a context of 1048575 bytes on a device of 81559 MiB", true}}}, ""},
		{"past 4 GiB", "seed GPU-a 81559 4294967297\n", Result{Devices: map[string]uint32{},
			Skipped: []Skip{{"GPU-a", "implausible figure: a context of 4294967297 bytes on a device of 81559 MiB", true}}}, ""},
		{"past half the device", "seed GPU-a 1000 524288001\nseed GPU-b 1000 524288000\n",
			Result{Seeds: []groupstate.DeviceSeed{seed(1000, 500<<10+1)}, Devices: map[string]uint32{"GPU-b": 500<<10 + 1},
				Skipped: []Skip{{"GPU-a", "implausible figure: a context of 524288001 bytes on a device of 1000 MiB", true}}}, ""},
		{"garbage", "hello\n", Result{}, "does not parse"},
		{"negative", "seed GPU-a 1 -5\n", Result{}, "not a device's figure"},
		{"no memory", "seed GPU-a 0 5\n", Result{}, "not a device's figure"},
		{"memory past 32 bits", "seed GPU-a 4294967296 5\n", Result{}, "not a device's figure"},
		{"a long name", "seed GPU-" + strings.Repeat("a", 64) + " 1 5\n", Result{}, "not a device's figure"},
		{"too many lines", strings.Repeat("skip #0 x\n", maxLines+1), Result{}, "more than"},
		{"a line too long", "skip #0 " + strings.Repeat("x", 5000) + "\n", Result{}, "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.out))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse: %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("seed GPU-a 81559 524288000\nskip #1 x\n"))
	f.Add([]byte("seed GPU-a 1 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		for _, s := range r.Seeds {
			if s.TotalMiB == 0 || s.KiB == 0 || s.KiB < MinContext>>10+1 || s.KiB > MaxContext>>10+1 || uint64(s.KiB-1)<<10 > uint64(s.TotalMiB)<<19+1023 {
				t.Fatalf("seed %+v from %q", s, b)
			}
		}
	})
}

// The probe itself (make bin/gpuslice-ctxprobe) against the simulated GPU
// (make bin/sim/...): its contexts take what GPUSLICE_SIM_CONTEXT_MEMORY says,
// and the probe says so; LD_PRELOAD is not passed on.
func TestRunSimulated(t *testing.T) {
	bin := os.Getenv("GPUSLICE_BIN") // make test-go
	if bin == "" {
		_, file, _, _ := runtime.Caller(0)
		bin = filepath.Join(filepath.Dir(file), "..", "..", "bin")
	}
	probe, sim := filepath.Join(bin, Binary), filepath.Join(bin, "sim")
	for _, p := range []string{probe, filepath.Join(sim, "libcuda.so.1")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s: %v (make %s)", p, err, strings.TrimPrefix(p, filepath.Dir(bin)+"/"))
		}
	}
	t.Setenv("LD_PRELOAD", "/nonexistent/libgpuslice.so")
	// A state of its own: the simulator's default (/dev/shm, one per user) is
	// every other process's on the machine, and one holding it with another
	// device configuration (or a GPU it marked lost) fails the probe.
	t.Setenv("GPUSLICE_SIM_STATE", filepath.Join(t.TempDir(), "sim.state"))
	for _, mem := range []struct {
		env  string
		want uint32
	}{{"314572800", 300<<10 + 1}, {"0", 0}, {"629145600", 600<<10 + 1}} {
		t.Setenv("GPUSLICE_SIM_CONTEXT_MEMORY", mem.env)
		r, err := Run(context.Background(), probe, filepath.Join(sim, "libcuda.so.1"), filepath.Join(sim, "libnvidia-ml.so.1"))
		if mem.want == 0 { // a context that takes nothing: not a figure to reserve by
			if err != nil || len(r.Seeds) != 0 || len(r.Skipped) != 1 || !r.Skipped[0].Retry {
				t.Fatalf("context memory 0: %+v, %v; want the device skipped, to be probed again", r, err)
			}
			continue
		}
		if err != nil || len(r.Seeds) != 1 || r.Seeds[0].KiB != mem.want || len(r.Skipped) != 0 {
			t.Fatalf("context memory %s: %+v, %v; want one seed of %d (1 + KiB)", mem.env, r, err, mem.want)
		}
	}
	libs := []string{filepath.Join(sim, "libcuda.so.1"), filepath.Join(sim, "libnvidia-ml.so.1")}
	r, err := Run(context.Background(), probe, libs...)
	if err != nil || len(r.Seeds) != 1 {
		t.Fatalf("every device: %+v, %v", r, err)
	}
	var uuid string
	for u := range r.Devices {
		uuid = u
	}
	// A kind measured already (-s): skipped, no context made; a device not
	// asked for (-d): not a line; the device asked for: measured.
	for _, tc := range []struct {
		want       Want
		seeds      int
		skip, none bool
	}{
		{Want{Seeded: []uint32{r.Seeds[0].TotalMiB}}, 0, true, false},
		{Want{Devices: []string{"GPU-00000000-0000-0000-0000-000000000009"}}, 0, false, true},
		{Want{Devices: []string{strings.ToUpper(uuid)}, Seeded: []uint32{1}}, 1, false, false},
	} {
		got, err := Run(context.Background(), probe, append(tc.want.Args(), libs...)...)
		if err != nil || len(got.Seeds) != tc.seeds || (len(got.Skipped) == 1) != tc.skip ||
			(tc.skip && !strings.Contains(got.Skipped[0].Reason, "is measured")) || (tc.none && len(got.Devices)+len(got.Skipped) != 0) {
			t.Fatalf("%+v: %+v, %v", tc.want, got, err)
		}
	}
	if _, err := Run(context.Background(), probe, "/nonexistent/libcuda.so.1"); err == nil || !strings.Contains(err.Error(), "no driver") {
		t.Fatalf("no driver: %v", err)
	}
}

// A probe killed when its caller gives up on it returns at most WaitDelay
// later, though a process it started still holds its output open (a hung
// driver's helper): without WaitDelay, Run waited for that process (30 s).
func TestRunGrandchildHoldsOutput(t *testing.T) {
	dir := t.TempDir()
	probe, pidFile := filepath.Join(dir, "probe"), filepath.Join(dir, "grandchild")
	script := fmt.Sprintf("#!/bin/sh\nsleep 30 &\necho $! > %s\nexec sleep 30\n", pidFile)
	if err := os.WriteFile(probe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL) // the grandchild this test started
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for { // cancel once the grandchild runs
			if _, err := os.Stat(pidFile); err == nil {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	start := time.Now()
	_, err := Run(ctx, probe)
	took := time.Since(start)
	if err == nil || took > 20*time.Second {
		t.Fatalf("Run: %v after %v; want an error within WaitDelay (%v) of the cancel", err, took, WaitDelay)
	}
}

// WholeGPUs keeps the UUIDs of the driver's whole GPUs (any case), in the
// driver's spelling: a MIG instance's UUID is none of them.
func TestWholeGPUs(t *testing.T) {
	devs := []gpu.Device{{UUID: "GPU-aa"}, {UUID: "GPU-bb"}}
	got := WholeGPUs([]string{"GPU-BB", "MIG-cc", "GPU-dd"}, devs)
	if !reflect.DeepEqual(got, []string{"GPU-bb"}) {
		t.Fatalf("WholeGPUs: %v", got)
	}
	if got := WholeGPUs([]string{"MIG-cc"}, devs); got == nil || len(got) != 0 {
		t.Fatalf("only a MIG instance: %#v, want an empty list (nothing to probe)", got)
	}
}

// The probe's environment has neither LD_PRELOAD nor CUDA_MPS_* variables.
func TestWithoutPreload(t *testing.T) {
	got := withoutPreload([]string{"A=1", "LD_PRELOAD=/x.so", "CUDA_MPS_PIPE_DIRECTORY=/tmp/mps", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G", "CUDA_VISIBLE_DEVICES=0"})
	if !reflect.DeepEqual(got, []string{"A=1", "CUDA_VISIBLE_DEVICES=0"}) {
		t.Fatalf("withoutPreload: %v", got)
	}
}
