package table

import (
	"context"
	"fmt"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// NVMLReader reads devices through gpuslice's NVML interface (the real driver
// or the simulated GPU). Every device that answers is Healthy; one whose
// memory or utilization query fails is reported Unhealthy.
type NVMLReader struct {
	NVML gpu.NVML
	// Owned tells whether a host PID belongs to a pod scheduled on the
	// GPU; nil counts no process as unscheduled.
	Owned func(index int, pid uint32) bool
}

// Devices implements GPUReader.
func (r NVMLReader) Devices(_ context.Context) ([]Device, error) {
	n, err := r.NVML.Count()
	if err != nil {
		return nil, fmt.Errorf("count GPUs: %w", err)
	}
	out := make([]Device, 0, n)
	for i := 0; i < n; i++ {
		d, err := r.NVML.Device(i)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		dev := Device{Index: int32(i), UUID: d.UUID, Model: d.Name, MemoryBytes: int64(d.MemoryTotal), Healthy: true}
		if u, err := r.NVML.Utilization(i); err == nil {
			dev.UtilizationPercent = int32(min(u.GPU, 100))
		} else {
			dev.Healthy = false
		}
		if _, err := r.NVML.Memory(i); err != nil {
			dev.Healthy = false
		}
		if procs, err := r.NVML.Processes(i); err == nil && r.Owned != nil {
			for _, p := range procs {
				if !r.Owned(i, p.PID) {
					dev.UnscheduledProcesses++
				}
			}
		}
		out = append(out, dev)
	}
	return out, nil
}
