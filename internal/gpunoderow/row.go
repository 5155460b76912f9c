// Package gpunoderow publishes a node's row of the gpuslice resource table (the
// GPUNode object): its GPUs as measured, what pods hold of them, the node's
// working state and a heartbeat. Every write is conditioned on the
// resourceVersion it read and retried on conflict, so concurrent writers
// never lose each other's changes or tear an object.
package gpunoderow

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// Device is one GPU as the node measures it.
type Device struct {
	Index       int32
	UUID        string
	Model       string
	MemoryBytes int64
	// UnitsTotal is the GPU's logical units (0: api.DefaultUnitsPerGPU).
	UnitsTotal int64
	Healthy    bool
	// HealthMessage says why an unhealthy GPU is unhealthy.
	HealthMessage      string
	UtilizationPercent int32
	// UnscheduledProcesses counts processes on the GPU that belong to no
	// pod scheduled there.
	UnscheduledProcesses int32
	// SharingMode is the GPU's mode ("": timeslice). In mps mode the
	// units free are also bounded by the client slots left:
	// (MPSClientSlots - MPSClients) x MPSUnitsPerClient.
	SharingMode                                   api.SharingMode
	MPSClients, MPSClientSlots, MPSUnitsPerClient int32
	// Elastic memory on the GPU (time-slice daemon): guaranteed, borrowed and spilled bytes.
	MemoryGuaranteed, MemoryBorrowed, MemorySpilled int64
}

// GPUReader reads the node's GPUs. The node agent implements it with NVML.
type GPUReader interface {
	Devices(ctx context.Context) ([]Device, error)
}

// Held is what pods hold of one GPU.
type Held struct {
	Units, MemoryBytes int64
}

// AllocationReader reports, per GPU index, what the pods on the node hold.
type AllocationReader interface {
	Held(ctx context.Context) (map[int32]Held, error)
}

// Status builds the GPUNode status from measured devices and holdings.
func Status(devs []Device, held map[int32]Held, state v1alpha2.NodeState, message string) (v1alpha2.GPUNodeStatus, error) {
	st := v1alpha2.GPUNodeStatus{State: state, Message: message}
	sorted := append([]Device(nil), devs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Index < sorted[j].Index })
	for _, d := range sorted {
		units := d.UnitsTotal
		if units == 0 {
			units = api.DefaultUnitsPerGPU
		}
		h := held[d.Index]
		g := v1alpha2.GPU{
			Index: d.Index, UUID: d.UUID, Model: d.Model, Memory: v1alpha2.Bytes(d.MemoryBytes), UnitsTotal: units,
			UnitsFree: max(units-h.Units, 0), MemoryFree: v1alpha2.Bytes(max(d.MemoryBytes-h.MemoryBytes, 0)),
			Health: v1alpha2.GPUUnhealthy, UtilizationPercent: min(max(d.UtilizationPercent, 0), 100),
			UnscheduledProcesses: max(d.UnscheduledProcesses, 0),
			MemoryGuaranteed:     v1alpha2.Bytes(max(d.MemoryGuaranteed, 0)), MemoryBorrowed: v1alpha2.Bytes(max(d.MemoryBorrowed, 0)),
			MemorySpilled: v1alpha2.Bytes(max(d.MemorySpilled, 0)),
		}
		if d.Healthy {
			g.Health = v1alpha2.GPUHealthy
		} else {
			g.HealthMessage = clipMessage(d.HealthMessage)
		}
		g.SharingMode = d.SharingMode
		if g.SharingMode == "" {
			g.SharingMode = api.SharingTimeslice
		}
		if g.SharingMode == api.SharingMPS {
			g.MPSClients = max(d.MPSClients, 0)
			slots := int64(max(d.MPSClientSlots-g.MPSClients, 0)) * int64(max(d.MPSUnitsPerClient, 0))
			g.UnitsFree = min(g.UnitsFree, slots)
		}
		st.GPUs = append(st.GPUs, g)
	}
	st.Summary = v1alpha2.Summarize(st.GPUs)
	st.State, st.Message = healthState(st.State, st.Message, st.GPUs)
	probe := v1alpha2.GPUNode{Status: st}
	if err := probe.Validate(); err != nil {
		return v1alpha2.GPUNodeStatus{}, fmt.Errorf("measured GPUs: %w", err)
	}
	return st, nil
}

// healthState: a Working node without a healthy GPU is NotReady; the message
// names each unhealthy GPU and why (beside a Working or Draining state too).
func healthState(state v1alpha2.NodeState, msg string, gpus []v1alpha2.GPU) (v1alpha2.NodeState, string) {
	var sick []string
	for _, g := range gpus {
		if g.Health != v1alpha2.GPUHealthy {
			why := g.HealthMessage
			if why == "" {
				why = "unhealthy"
			}
			sick = append(sick, fmt.Sprintf("GPU %d (%s): %s", g.Index, g.UUID, why))
		}
	}
	if len(sick) == 0 {
		return state, msg
	}
	if state == v1alpha2.NodeWorking && len(sick) == len(gpus) {
		state = v1alpha2.NodeNotReady
		sick = append([]string{"no healthy GPU"}, sick...)
	}
	if msg != "" {
		sick = append([]string{msg}, sick...)
	}
	return state, clipTo(strings.Join(sick, "; "), 1000)
}
