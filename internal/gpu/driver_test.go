package gpu

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testbin"
)

// TestDriversOpenedConcurrently: one process opens the driver from several
// goroutines at once (the time-slice daemon's GPU lister opens and closes it
// for each listing while its device-memory reader keeps its own open); each
// sees every GPU (go test -race: go-nvml's package state is not raced on).
func TestDriversOpenedConcurrently(t *testing.T) {
	sim := filepath.Join(testbin.Dir(t, "sim/libnvidia-ml.so.1"), "sim")
	t.Setenv("GPUSLICE_SIM_STATE", filepath.Join(t.TempDir(), "sim.state"))
	want := -1
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				drv, err := OpenDriver(ModeSim, sim)
				if err != nil {
					t.Error(err)
					return
				}
				devs, err := Devices(drv.NVML)
				if serr := drv.NVML.Shutdown(); serr != nil {
					t.Error(serr)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if want < 0 {
					want = len(devs)
				}
				if len(devs) != want || want == 0 {
					t.Errorf("%d GPUs, want %d (and some)", len(devs), want)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// TestSimulatedComputeCapability: the simulated driver answers NVML's compute
// capability as a driver does (the simulated GPU is an sm_90 part, as its
// cuDeviceComputeCapability says).
func TestSimulatedComputeCapability(t *testing.T) {
	sim := filepath.Join(testbin.Dir(t, "sim/libnvidia-ml.so.1"), "sim")
	t.Setenv("GPUSLICE_SIM_STATE", filepath.Join(t.TempDir(), "sim.state"))
	drv, err := OpenDriver(ModeSim, sim)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := drv.NVML.Shutdown(); err != nil {
			t.Error(err)
		}
	}()
	devs, err := Devices(drv.NVML)
	if err != nil || len(devs) == 0 {
		t.Fatalf("devices %+v, %v", devs, err)
	}
	for _, d := range devs {
		if d.ComputeCapability != "9.0" {
			t.Errorf("GPU %d compute capability %q, want 9.0", d.Index, d.ComputeCapability)
		}
	}
}
