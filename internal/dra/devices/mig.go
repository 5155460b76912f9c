package devices

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/nodedev"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// Attributes of a MIG device (besides index, productName, memory,
// driverVersion, cudaComputeCapability and sharingMode).
const (
	AttrMIGProfile   resourceapi.QualifiedName = "migProfile"   // "3g.40gb"
	AttrMIGPlacement resourceapi.QualifiedName = "migPlacement" // first memory slice
	AttrParentUUID   resourceapi.QualifiedName = "parentUUID"
	// AttrMIGStatic: an instance the node's admin made (static mode).
	AttrMIGStatic resourceapi.QualifiedName = "migStatic"
)

// Limits of one ResourceSlice (k8s.io/api/resource/v1).
const (
	maxDevicesWithCounters = 64 // devices per slice when any consumes counters or is tainted
	maxCounterSets         = resourceapi.ResourceSliceMaxCounterSets
)

// MIGGPU is a GPU in MIG mode as the builder needs it.
type MIGGPU struct {
	GPU           nodedev.MIGGPU
	DriverVersion string
	// Units is each instance's units total (a timeslice device's, 100).
	Units int64
	// Ours says whether a GPU instance was made by a claim.
	Ours   func(gi uint32) bool
	Taints []resourceapi.DeviceTaint
}

// BuildMIG returns a MIG GPU's counter set (its memory and compute slices
// free for instances made by claims) and one device per instance it offers
// (nodedev.Layout): an instance not made yet is made when a claim gets it,
// an admin's is used as it is. Each device is shareable like a whole GPU:
// units and memory of the instance are consumable capacities.
func BuildMIG(g MIGGPU) (resourceapi.CounterSet, []resourceapi.Device, error) {
	p := g.GPU.GPU
	if p.UUID == "" {
		return resourceapi.CounterSet{}, nil, fmt.Errorf("GPU %d: no UUID", p.Index)
	}
	if g.Units < 2 {
		return resourceapi.CounterSet{}, nil, fmt.Errorf("GPU %d: units total %d: want at least 2", p.Index, g.Units)
	}
	ours := g.Ours
	if ours == nil {
		ours = func(uint32) bool { return false }
	}
	set := resourceapi.CounterSet{Name: nodedev.CounterSetName(p.Index), Counters: counters(nodedev.Counters(g.GPU, ours))}
	var out []resourceapi.Device
	for _, m := range nodedev.Layout(g.GPU, ours) {
		out = append(out, migDevice(g, m))
	}
	return set, out, nil
}

func counters(m map[string]int64) map[string]resourceapi.Counter {
	out := make(map[string]resourceapi.Counter, len(m))
	for k, v := range m {
		out[k] = resourceapi.Counter{Value: *resource.NewQuantity(v, resource.DecimalSI)}
	}
	return out
}

func migDevice(g MIGGPU, m nodedev.MIG) resourceapi.Device {
	p := m.Parent
	mem := m.MemoryBytes() / MemoryStep * MemoryStep
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrIndex:        {IntValue: ptr.To(int64(p.Index))},
		AttrParentUUID:   {StringValue: ptr.To(p.UUID)},
		AttrMemory:       {IntValue: ptr.To(m.MemoryBytes())},
		AttrSharing:      {StringValue: ptr.To(string(api.SharingTimeslice))},
		AttrProductName:  {StringValue: ptr.To(orUnknown(p.ProductName))},
		AttrMIGProfile:   {StringValue: ptr.To(m.Profile.Name)},
		AttrMIGPlacement: {IntValue: ptr.To(int64(m.Placement.Start))},
		AttrMIGStatic:    {BoolValue: ptr.To(m.Static)},
	}
	if m.Static {
		attrs[AttrUUID] = resourceapi.DeviceAttribute{StringValue: ptr.To(m.VisibleID())}
	}
	if v := semver(g.DriverVersion); v != "" {
		attrs[AttrDriverVersion] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	if v := semver(p.ComputeCapability); v != "" {
		attrs[AttrComputeCapability] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	d := shareable(m.Name(), attrs, mem, g.Units, g.Taints)
	if c := m.Consumes(); c != nil {
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: nodedev.CounterSetName(p.Index), Counters: counters(c)}}
	}
	return d
}

// Slices lays a pool's devices and counter sets out in ResourceSlices
// within the API's limits: counter sets in slices of their own (a slice
// holds devices or counter sets), at most 8 each; devices at most 64 a
// slice (the limit once any consumes counters or is tainted).
func Slices(devs []resourceapi.Device, sets []resourceapi.CounterSet) []resourceslice.Slice {
	var out []resourceslice.Slice
	for i := 0; i < len(sets); i += maxCounterSets {
		out = append(out, resourceslice.Slice{SharedCounters: sets[i:min(i+maxCounterSets, len(sets))]})
	}
	for i := 0; i < len(devs); i += maxDevicesWithCounters {
		out = append(out, resourceslice.Slice{Devices: devs[i:min(i+maxDevicesWithCounters, len(devs))]})
	}
	if len(out) == 0 {
		out = append(out, resourceslice.Slice{})
	}
	return out
}
