package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/h100fake"
	"github.com/gpuslice/gpuslice/internal/output"
)

// A GPU in MIG mode has no utilization (NVML: NOT_SUPPORTED, as on a real
// driver): smi lists it with "n/a"; any other utilization error still fails.
func TestSMIMIGNoUtilization(t *testing.T) {
	s := h100fake.New(1, true)
	s.GPUs[0].GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
	s.GPUs[0].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	s.GPUs[0].GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	n, _, err := s.Open()
	if err != nil {
		t.Fatal(err)
	}
	drv := &gpu.Driver{NVML: n, Version: "580.65.06"}
	devs, err := gpu.Devices(n)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := readSMI(drv, devs)
	if err != nil || len(doc.GPUs) != 1 || !doc.GPUs[0].UtilizationNotSupported {
		t.Fatalf("smi of a MIG GPU: %+v, %v", doc, err)
	}
	var b bytes.Buffer
	if err := writeSMI(&b, doc, output.Wide); err != nil || strings.Count(b.String(), "n/a") != 2 {
		t.Fatalf("table %q, %v: want n/a for both utilizations", b.String(), err)
	}
	s.GPUs[0].GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST }
	if _, err := readSMI(drv, devs); err == nil {
		t.Fatal("a lost GPU's utilization error was swallowed")
	}
}
