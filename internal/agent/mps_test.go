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
	bin := os.Getenv("GPUSLICE_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "bin")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"sim/gpuslice-sim-mps-control", "sim/libcuda.so.1", "gs-share-tenant"} {
		if _, err := os.Stat(filepath.Join(bin, f)); err != nil {
			t.Skipf("needs the build outputs (run make): %v", err)
		}
	}
	root, err := os.MkdirTemp("", "mps") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	const uuid = "GPU-5e1ac0de-6770-7573-6c69-636500000000"
	cfg := DefaultConfig(func(string) string { return "" })
	cfg.Sharing, cfg.MPSDir = "0=mps,1=timeslice", root
	sh, err := newSharing(cfg, &gpu.Driver{Simulated: true, LibDir: filepath.Join(bin, "sim")},
		[]gpuset.GPU{{Index: 0, UUID: uuid}, {Index: 1, UUID: "GPU-other"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	sh.run(gctx, g)
	defer func() {
		cancel()
		if err := g.Wait(); err != nil {
			t.Error(err)
		}
	}()
	inj := sh.inject()[uuid]
	if len(inj.PipeDirs) != 1 || inj.ServerUnits != 96 {
		t.Fatalf("inject = %+v, want one pipe dir and 96 server units", inj)
	}
	r := sharingReader{s: sh, r: fixedReader{{Index: 0, UUID: uuid, MemoryBytes: 1 << 30, Healthy: true}, {Index: 1, UUID: "GPU-other", MemoryBytes: 1 << 30, Healthy: true}}}
	measure := func() gpunoderow.Device {
		t.Helper()
		devs, err := r.Devices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if devs[1].SharingMode != api.SharingTimeslice || devs[1].UnitsTotal != 0 {
			t.Fatalf("timeslice GPU measured as %+v", devs[1])
		}
		return devs[0]
	}
	waitClients := func(want int32) gpunoderow.Device {
		t.Helper()
		var d gpunoderow.Device
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if d = measure(); d.MPSClients == want {
				return d
			}
		}
		t.Fatalf("live clients %d, want %d (daemon not up or client not admitted in 20 s)", d.MPSClients, want)
		return d
	}
	d := waitClients(0)
	if d.SharingMode != api.SharingMPS || d.UnitsTotal != 96 || d.MPSClientSlots != 48 || d.MPSUnitsPerClient != 2 {
		t.Fatalf("mps GPU measured as %+v", d)
	}
	tenant := exec.Command(filepath.Join(bin, "gs-share-tenant"), "--kernel-us", "1000", "--gap-us", "1000", "--seconds", "30")
	tenant.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Join(bin, "sim"), "CUDA_MPS_PIPE_DIRECTORY="+inj.PipeDirs[0],
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=27", "GPUSLICE_SIM_STATE="+filepath.Join(root, "sim.state"))
	if err := tenant.Start(); err != nil {
		t.Fatal(err)
	}
	waitClients(1)
	// The server (the agent's) is no unscheduled process; its client is not a server.
	ps, err := sh.daemons[uuid][0].Servers(ctx)
	if err != nil || len(ps) != 1 || !sh.server(uint32(ps[0])) || sh.server(uint32(tenant.Process.Pid)) {
		t.Fatalf("servers %v (%v): server(%v) = %v, server(client %d) = %v", ps, err, ps, len(ps) == 1 && sh.server(uint32(ps[0])),
			tenant.Process.Pid, sh.server(uint32(tenant.Process.Pid)))
	}
	_ = tenant.Process.Kill()
	_ = tenant.Wait()
	waitClients(0)
}
