package gpu

import (
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

func TestDevicesFromMockServer(t *testing.T) {
	server := dgxa100.New()
	n := Wrap(server)
	if err := n.Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	devs, err := Devices(n)
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	if len(devs) != 8 {
		t.Fatalf("got %d devices, want 8 (DGX A100)", len(devs))
	}
	for i, d := range devs {
		if d.Index != i || d.UUID == "" || d.Name == "" || d.MemoryTotal == 0 {
			t.Errorf("device %d incomplete: %+v", i, d)
		}
	}
	if devs[0].UUID == devs[1].UUID {
		t.Errorf("devices share a UUID: %s", devs[0].UUID)
	}
	if devs[0].ComputeCapability != "8.0" { // an A100
		t.Errorf("compute capability %q, want 8.0", devs[0].ComputeCapability)
	}
	server.Devices[1].(*dgxa100.Device).GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) {
		return 0, 0, nvml.ERROR_NOT_SUPPORTED
	}
	if d, err := n.Device(1); err != nil || d.ComputeCapability != "" {
		t.Errorf("a driver without the compute capability: %+v, %v (want the device, no capability)", d, err)
	}
}

func TestUtilizationAndProcesses(t *testing.T) {
	server := dgxa100.New()
	dev := server.Devices[2].(*dgxa100.Device)
	dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{Gpu: 73, Memory: 12}, nvml.SUCCESS
	}
	dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 42, UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
	}
	// MPS clients (a real driver lists them only here), once per pid.
	dev.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 42, UsedGpuMemory: 1 << 30}, {Pid: 43, UsedGpuMemory: 1 << 20}}, nvml.SUCCESS
	}
	n := Wrap(server)
	u, err := n.Utilization(2)
	if err != nil || u.GPU != 73 || u.Memory != 12 {
		t.Fatalf("Utilization = %+v, %v", u, err)
	}
	ps, err := n.Processes(2)
	if err != nil || len(ps) != 2 || ps[0].PID != 42 || ps[0].UsedMemory != 1<<30 || ps[1].PID != 43 {
		t.Fatalf("Processes = %+v, %v", ps, err)
	}
	dev.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return nil, nvml.ERROR_FUNCTION_NOT_FOUND // an older driver: the compute list alone
	}
	if ps, err := n.Processes(2); err != nil || len(ps) != 1 || ps[0].PID != 42 {
		t.Fatalf("Processes without an MPS list = %+v, %v", ps, err)
	}
}

func TestErrorsAreWrapped(t *testing.T) {
	server := dgxa100.New()
	n := Wrap(server)
	_, err := n.Device(99)
	if !errors.Is(err, ErrNVML) {
		t.Fatalf("Device(99) error %v does not wrap ErrNVML", err)
	}
	dev := server.Devices[0].(*dgxa100.Device)
	dev.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	if _, err := n.Memory(0); !errors.Is(err, ErrNVML) {
		t.Fatalf("Memory on a lost GPU: %v", err)
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeAuto, "auto": ModeAuto, "real": ModeReal, "sim": ModeSim} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseMode("cuda"); err == nil {
		t.Error("ParseMode(cuda) succeeded")
	}
}
