package agent

import (
	"context"
	"errors"
	"os"
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
	"github.com/gpuslice/gpuslice/internal/health/xidrecord"
	"github.com/gpuslice/gpuslice/internal/testbin"
)

// The health monitor on the simulated GPU through go-nvml, as on a real
// driver. One driver for all: the simulated NVML reads its state file's
// name once per process.
func TestHealthMonitorOnSimulatedGPU(t *testing.T) {
	bin := testbin.Dir(t, "sim/gpuslice-sim-ctl", "sim/libnvidia-ml.so.1")
	drv, gpus, found := openSimGPUs(t, bin, 3)
	sim := simCtl(t, filepath.Join(bin, "sim", "gpuslice-sim-ctl"))
	t.Run("events", func(t *testing.T) { testHealthEvents(t, drv, gpus, found, sim) })
	t.Run("xid-survives-restart", func(t *testing.T) { testHealthXIDSurvivesRestart(t, drv, gpus, sim) })
}

// testHealthEvents: application and skipped XIDs change nothing, a critical
// XID withdraws its GPU, a GPU whose queries fail is withdrawn while they
// fail, and the GPUNode reader says why. "Nothing changed" is checked by
// order: the monitor handles events one by one, so the change for a later
// event proves the earlier ones seen.
func testHealthEvents(t *testing.T, drv *gpu.Driver, gpus []gpuset.GPU, found []gpu.Device, sim func(...string)) {
	cfg := DefaultConfig(func(string) string { return "" })
	cfg.HealthPeriod, cfg.HealthSkipXIDs = 100*time.Millisecond, []uint64{94}
	cfg.RunDir = t.TempDir()
	ctx, mon, next := startHealthMonitor(t, cfg, drv, gpus)
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

// simCtl runs gpuslice-sim-ctl, failing the test if it fails.
func simCtl(t *testing.T, ctl string) func(args ...string) {
	return func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ctl, args...).CombinedOutput(); err != nil {
			t.Fatalf("gpuslice-sim-ctl %v: %v\n%s", args, err, out)
		}
	}
}

// testHealthXIDSurvivesRestart: a critical XID on a GPU that still answers
// NVML (GPU 0) outlives the agent: a restarted agent's monitor starts with the GPU unhealthy for the same XID
// and reason, before any event (its DRA device tainted from the first
// slice); a record of an earlier boot (the GPUs reset since) is ignored,
// and a corrupt one refused.
func testHealthXIDSurvivesRestart(t *testing.T, drv *gpu.Driver, gpus []gpuset.GPU, sim func(...string)) {
	gpus = gpus[:2] // GPU 0 and the one withdrawn by events' XID 79 (of no record here)
	cfg := DefaultConfig(func(string) string { return "" })
	cfg.HealthPeriod, cfg.RunDir, cfg.ProcRoot = 100*time.Millisecond, t.TempDir(), fakeProc(t, "boot-1")
	_, mon, next := startHealthMonitor(t, cfg, drv, gpus)
	sim("xid", gpus[0].UUID, "48")
	if c := next("XID 48"); c.UUID != gpus[0].UUID || c.Cause != health.CauseXID || c.XID != 48 {
		t.Fatalf("XID 48 on GPU 0: %+v", c)
	}
	before := mon.status(gpus[0].UUID)
	restarted := func(cfg Config) (*healthMonitor, []health.Change, error) {
		var changes []health.Change
		m := newHealthMonitor(cfg, drv, gpus, func(cs []health.Change) { changes = append(changes, cs...) })
		err := m.restore(context.Background())
		return m, changes, err
	}
	again, changes, err := restarted(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.status(gpus[0].UUID); got != before || len(changes) != 1 || changes[0] != before {
		t.Fatalf("after a restart GPU 0 is %+v (changes %+v), want %+v", got, changes, before)
	}
	if h := taintHealth(again.status(gpus[0].UUID)); h.Healthy || h.Reason != "xid-48" {
		t.Errorf("the restarted agent's DRA taint health: %+v, want unhealthy xid-48", h)
	}
	if !again.status(gpus[1].UUID).Healthy {
		t.Error("GPU 1 has no XID in this record and is unhealthy after the restart")
	}
	// GPU 0 withheld at a restart (lost, say): its XID stays in the record
	// when another GPU's is added.
	var withheld []health.Change
	one := newHealthMonitor(cfg, drv, gpus[1:], func(cs []health.Change) { withheld = append(withheld, cs...) })
	if err := one.restore(context.Background()); err != nil || len(withheld) != 0 {
		t.Fatalf("restore without GPU 0: %v, changes %+v", err, withheld)
	}
	one.apply(context.Background(), func(tr *health.Tracker) []health.Change { return tr.XID(gpus[1].UUID, 62, time.Now()) })
	rec, _, err := xidrecord.Load(filepath.Join(cfg.RunDir, xidrecord.FileName), "boot-1")
	if err != nil || rec[gpus[0].UUID].XID != 48 || rec[gpus[1].UUID].XID != 62 {
		t.Fatalf("record after an XID beside a withheld GPU: %+v, %v", rec, err)
	}
	cfg.ProcRoot = fakeProc(t, "boot-2")
	if rebooted, _, err := restarted(cfg); err != nil || !rebooted.status(gpus[0].UUID).Healthy {
		t.Fatalf("a record of an earlier boot: %v, GPU 0 %+v", err, rebooted.status(gpus[0].UUID))
	}
	path := filepath.Join(cfg.RunDir, xidrecord.FileName)
	if err := os.WriteFile(path, []byte(`{"version":"v1","checksum":"00","data":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := restarted(cfg); !errors.Is(err, xidrecord.ErrCorrupt) {
		t.Fatalf("a corrupt record: %v, want ErrCorrupt", err)
	}
}

// fakeProc is a /proc with only the boot ID.
func fakeProc(t *testing.T, bootID string) string {
	t.Helper()
	proc := t.TempDir()
	dir := filepath.Join(proc, "sys", "kernel", "random")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "boot_id"), []byte(bootID+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return proc
}

// openSimGPUs opens the simulated driver of bin/sim with n GPUs of the test
// process's state file (withSimState), and finds them; NVML is shut down when
// the test ends.
func openSimGPUs(t *testing.T, bin string, n int) (*gpu.Driver, []gpuset.GPU, []gpu.Device) {
	t.Helper()
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
	if err := mon.restore(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
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
