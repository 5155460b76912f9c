package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpunoderow"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/testbin"
	"github.com/gpuslice/gpuslice/pkg/api"
)

type fixedReader []gpunoderow.Device

func (f fixedReader) Devices(context.Context) ([]gpunoderow.Device, error) {
	return append([]gpunoderow.Device(nil), f...), nil
}

// On the simulated GPU with its stand-in MPS daemon: the agent's daemon for
// an mps GPU admits a client (a CUDA program with the injected environment),
// and the GPUNode measurement counts it and bounds the units free; the
// daemon's server is known as the agent's (not an unscheduled process).
func TestSharingMeasuresLiveClients(t *testing.T) {
	bin := testbin.Dir(t, "sim/gpuslice-sim-mps-control", "sim/libcuda.so.1", "gs-share-tenant")
	root, err := os.MkdirTemp("", "mps") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	const uuid = "GPU-5e1ac0de-6770-7573-6c69-636500000000"
	cfg := DefaultConfig(func(string) string { return "" })
	cfg.Sharing, cfg.MPSDir = "0=mps,1=timeslice", root
	ctx, sh := startSharing(t, cfg, bin, []gpuset.GPU{{Index: 0, UUID: uuid}, {Index: 1, UUID: "GPU-other"}})
	inj := sh.inject()[uuid]
	if len(inj.PipeDirs) != 1 || inj.ServerUnits != 96 {
		t.Fatalf("inject = %+v, want one pipe dir and 96 server units", inj)
	}
	m := mpsMeasure{t: t, ctx: ctx, r: sharingReader{s: sh, r: fixedReader{{Index: 0, UUID: uuid, MemoryBytes: 1 << 30, Healthy: true},
		{Index: 1, UUID: "GPU-other", MemoryBytes: 1 << 30, Healthy: true}}}}
	d := m.waitClients(0)
	if d.SharingMode != api.SharingMPS || d.UnitsTotal != 96 || d.MPSClientSlots != 48 || d.MPSUnitsPerClient != 2 {
		t.Fatalf("mps GPU measured as %+v", d)
	}
	tenant := exec.Command(filepath.Join(bin, "gs-share-tenant"), "--kernel-us", "1000", "--gap-us", "1000", "--seconds", "30")
	tenant.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Join(bin, "sim"), "CUDA_MPS_PIPE_DIRECTORY="+inj.PipeDirs[0],
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=27", "GPUSLICE_SIM_STATE="+filepath.Join(root, "sim.state"))
	if err := tenant.Start(); err != nil {
		t.Fatal(err)
	}
	m.waitClients(1)
	// The server (the agent's) is no unscheduled process; its client is not a server.
	ps, err := sh.daemons[uuid][0].Servers(ctx)
	if err != nil || len(ps) != 1 || !sh.server(uint32(ps[0])) || sh.server(uint32(tenant.Process.Pid)) {
		t.Fatalf("servers %v (%v): server(%v) = %v, server(client %d) = %v", ps, err, ps, len(ps) == 1 && sh.server(uint32(ps[0])),
			tenant.Process.Pid, sh.server(uint32(tenant.Process.Pid)))
	}
	_ = tenant.Process.Kill()
	_ = tenant.Wait()
	m.waitClients(0)
}

// startSharing runs the sharing of gpus on the simulated GPU of bin/sim
// until the test ends.
func startSharing(t *testing.T, cfg Config, bin string, gpus []gpuset.GPU) (context.Context, *sharing) {
	t.Helper()
	sh, err := newSharing(cfg, &gpu.Driver{Simulated: true, LibDir: filepath.Join(bin, "sim")}, gpus)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	sh.run(gctx, g)
	t.Cleanup(func() {
		cancel()
		if err := g.Wait(); err != nil {
			t.Error(err)
		}
	})
	return ctx, sh
}

// mpsMeasure measures GPU 0 (mps) and GPU 1 (timeslice) through r.
type mpsMeasure struct {
	t   *testing.T
	ctx context.Context
	r   sharingReader
}

// gpu0 is GPU 0's measurement; GPU 1 must measure as a timeslice GPU.
func (m mpsMeasure) gpu0() gpunoderow.Device {
	m.t.Helper()
	devs, err := m.r.Devices(m.ctx)
	if err != nil {
		m.t.Fatal(err)
	}
	if devs[1].SharingMode != api.SharingTimeslice || devs[1].UnitsTotal != 0 {
		m.t.Fatalf("timeslice GPU measured as %+v", devs[1])
	}
	return devs[0]
}

// waitClients waits up to 20 s for GPU 0 to count want live MPS clients.
func (m mpsMeasure) waitClients(want int32) gpunoderow.Device {
	m.t.Helper()
	var d gpunoderow.Device
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if d = m.gpu0(); d.MPSClients == want {
			return d
		}
	}
	m.t.Fatalf("live clients %d, want %d (daemon not up or client not admitted in 20 s)", d.MPSClients, want)
	return d
}
