package gpunoderow

import (
	"context"
	"fmt"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// NVMLReader reads devices through gpuslice's NVML interface (the real driver
// or the simulated GPU). A device is Healthy when its memory and utilization
// queries answer and Health (if set) calls it healthy.
type NVMLReader struct {
	NVML gpu.NVML
	// Owned tells whether a host PID belongs to a pod scheduled on the
	// GPU; nil counts no process as unscheduled.
	Owned func(index int, pid uint32) bool
	// Health is the node agent's health of a GPU (XID events and its own
	// queries) and why it is unhealthy; nil: healthy.
	Health func(uuid string) (healthy bool, why string)
	// Known are the GPUs found at start: a GPU of them that NVML can no
	// longer describe is published Unhealthy instead of failing the read.
	Known []gpu.Device
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
			if i >= len(r.Known) || r.Known[i].Index != i {
				return nil, fmt.Errorf("GPU %d: %w", i, err)
			}
			k := r.Known[i]
			out = append(out, Device{Index: int32(i), UUID: k.UUID, Model: k.Name, MemoryBytes: int64(k.MemoryTotal),
				HealthMessage: "NVML cannot describe the GPU: " + err.Error()})
			continue
		}
		out = append(out, r.device(i, d))
	}
	return out, nil
}

func (r NVMLReader) device(i int, d gpu.Device) Device {
	dev := Device{Index: int32(i), UUID: d.UUID, Model: d.Name, MemoryBytes: int64(d.MemoryTotal), Healthy: true}
	fail := func(err error) {
		if dev.Healthy {
			dev.Healthy, dev.HealthMessage = false, "NVML query failed: "+err.Error()
		}
	}
	if u, err := r.NVML.Utilization(i); err == nil {
		dev.UtilizationPercent = int32(min(u.GPU, 100))
	} else {
		fail(err)
	}
	if _, err := r.NVML.Memory(i); err != nil {
		fail(err)
	}
	if r.Health != nil {
		if ok, why := r.Health(d.UUID); !ok {
			dev.Healthy, dev.HealthMessage = false, why
		}
	}
	if procs, err := r.NVML.Processes(i); err == nil && r.Owned != nil {
		for _, p := range procs {
			if !r.Owned(i, p.PID) {
				dev.UnscheduledProcesses++
			}
		}
	}
	return dev
}
