package agent

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpunoderow"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/health"
	"github.com/gpuslice/gpuslice/internal/testbin"
)

// On the simulated GPU through go-nvml, as on a real driver: application
// and skipped XIDs change nothing, a critical XID withdraws its GPU, a GPU
// whose queries fail is withdrawn while they fail, and the GPUNode reader
// says why. "Nothing changed" is checked by order: the monitor handles events
// one by one, so the change for a later event proves the earlier ones seen.
func TestHealthMonitorOnSimulatedGPU(t *testing.T) {
	bin := testbin.Dir(t, "sim/gpuslice-sim-ctl", "sim/libnvidia-ml.so.1")
	ctl := filepath.Join(bin, "sim", "gpuslice-sim-ctl")
	drv, gpus, found := openSimGPUs(t, bin, 3)
	cfg := DefaultConfig(func(string) string { return "" })
	cfg.HealthPeriod, cfg.HealthSkipXIDs = 100*time.Millisecond, []uint64{94}
	ctx, mon, next := startHealthMonitor(t, cfg, drv, gpus)
	sim := func(args ...string) {
		if out, err := exec.Command(ctl, args...).CombinedOutput(); err != nil {
			t.Fatalf("gpuslice-sim-ctl %v: %v\n%s", args, err, out)
		}
	}
	sim("xid", "0", "13")
	sim("xid", gpus[0].UUID, "94")
	sim("xid", "1", "79")
	if c := next("XID 79"); c.UUID != gpus[1].UUID || c.Healthy || c.Cause != health.CauseXID || !strings.HasPrefix(c.Reason, "XID 79 (GPU has fallen off the bus) at ") {
		t.Fatalf("after XIDs 13 and 94 on GPU 0 and 79 on GPU 1: %+v", c)
	}
	if !mon.status(gpus[0].UUID).Healthy {
		t.Fatal("an application or skipped XID withdrew GPU 0")
	}
	sim("lost", "2")
	if c := next("lost GPU"); c.UUID != gpus[2].UUID || c.Healthy || c.Cause != health.CauseQuery || !strings.Contains(c.Reason, "GPU is lost") {
		t.Fatalf("lost GPU 2: %+v", c)
	}
	r := gpunoderow.NVMLReader{NVML: drv.NVML, Known: found, Health: func(u string) (bool, string) { s := mon.status(u); return s.Healthy, s.Reason }}
	devs, err := r.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 3 || !devs[0].Healthy || devs[1].Healthy || !strings.HasPrefix(devs[1].HealthMessage, "XID 79") ||
		devs[2].Healthy || devs[2].UUID != gpus[2].UUID || !strings.Contains(devs[2].HealthMessage, "GPU is lost") {
		t.Fatalf("GPUNode reader: %+v", devs)
	}
	sim("found", "2")
	if c := next("found GPU"); c.UUID != gpus[2].UUID || !c.Healthy {
		t.Fatalf("GPU 2 answering again: %+v", c)
	}
	if s := mon.status(gpus[1].UUID); s.Healthy {
		t.Fatal("an XID is not sticky")
	}
}

// openSimGPUs opens the simulated driver of bin/sim with n GPUs of a state
// file of the test's own, and finds them; NVML is shut down when the test
// ends.
func openSimGPUs(t *testing.T, bin string, n int) (*gpu.Driver, []gpuset.GPU, []gpu.Device) {
	t.Helper()
	t.Setenv("GPUSLICE_SIM_STATE", filepath.Join(t.TempDir(), "sim.state"))
	t.Setenv("GPUSLICE_SIM_GPUS", strconv.Itoa(n))
	drv, err := gpu.OpenDriver(gpu.ModeSim, filepath.Join(bin, "sim"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drv.NVML.Shutdown(); err != nil {
			t.Error(err)
		}
	})
	gpus, found, err := discover(context.Background(), drv.NVML)
	if err != nil {
		t.Fatal(err)
	}
	return drv, gpus, found
}

// startHealthMonitor runs a health monitor of gpus until the test ends
// (at most a minute, the context returned) and waits until it watches for
// events and is ready. next returns its next change, or fails the test
// naming what it waited for.
func startHealthMonitor(t *testing.T, cfg Config, drv *gpu.Driver, gpus []gpuset.GPU) (ctx context.Context, mon *healthMonitor, next func(what string) health.Change) {
	t.Helper()
	changes := make(chan health.Change, 16)
	mon = newHealthMonitor(cfg, drv, gpus, func(cs []health.Change) {
		for _, c := range cs {
			changes <- c
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	done := make(chan error, 1)
	go func() { done <- mon.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case <-mon.watching:
	case <-ctx.Done():
		t.Fatal("the monitor never registered for events")
	}
	if err := mon.ready(ctx); err != nil {
		t.Fatal(err)
	}
	next = func(what string) health.Change {
		select {
		case c := <-changes:
			return c
		case <-ctx.Done():
			t.Fatalf("no health change for %s", what)
			return health.Change{}
		}
	}
	return ctx, mon, next
}
