// Package devices builds the DRA devices the gpuslice.io driver publishes in
// its node's ResourceSlice: one device per GPU, shareable
// (allowMultipleAllocations) with two consumable capacities, memory (bytes)
// and units (the GPU's units total: 100 on a timeslice GPU, M x 48 x K on an
// mps GPU), whose request policies are what the node can enforce. Each
// policy's default is the whole capacity, so a claim with no capacity request
// takes the GPU exclusively. Pure: no API server, no NVML.
package devices

import (
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/nodedev"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// Capacity and attribute names (in the driver's domain, gpuslice.io).
const (
	CapacityMemory resourceapi.QualifiedName = "memory"
	CapacityUnits  resourceapi.QualifiedName = "units"

	AttrUUID              resourceapi.QualifiedName = "uuid"
	AttrIndex             resourceapi.QualifiedName = "index"
	AttrProductName       resourceapi.QualifiedName = "productName"
	AttrMemory            resourceapi.QualifiedName = "memory"
	AttrDriverVersion     resourceapi.QualifiedName = "driverVersion"
	AttrComputeCapability resourceapi.QualifiedName = "cudaComputeCapability"
	AttrSharing           resourceapi.QualifiedName = "sharingMode"
)

// The DeviceClasses the chart makes for the driver's devices
// (deploy/helm/gpuslice/templates/dra.yaml; test/helm's
// TestDeviceClassesSelect renders the chart and checks these names):
// whole GPUs, shares (units and memory requests), any MIG instance, and the
// instances of one MIG profile (ClassMIGProfile).
const (
	ClassWhole = "gpu.gpuslice.io"
	ClassShare = "share.gpuslice.io"
	ClassMIG   = "mig.gpuslice.io"
)

// ClassMIGProfile is the DeviceClass of MIG profile profile's instances
// ("mig-1g.10gb.gpuslice.io").
func ClassMIGProfile(profile string) string { return "mig-" + profile + ".gpuslice.io" }

// MemoryStep is the granularity of a memory request: the limit the node
// enforces is in bytes, but requests are rounded up to whole MiB so that a
// GPU's total (a multiple of 1 MiB on every NVIDIA GPU) is a valid request.
const MemoryStep = 1 << 20

// GPU is what the builder needs to know about one whole GPU: the node's
// model of it (internal/nodedev) and how the node shares it.
type GPU struct {
	nodedev.GPU
	DriverVersion string // e.g. "580.65.06"
	Sharing       api.SharingMode
	Units         int64 // the GPU's units total
	Taints        []resourceapi.DeviceTaint
}

// Name is the device name of the GPU with index i: gpu-<i> (nodedev.GPU.Name).
func Name(i int32) string { return nodedev.GPU{Index: i}.Name() }

// Build returns one device per GPU, in the given order.
func Build(gpus []GPU) ([]resourceapi.Device, error) {
	out := make([]resourceapi.Device, 0, len(gpus))
	seen := map[int32]bool{}
	for _, g := range gpus {
		if seen[g.Index] {
			return nil, fmt.Errorf("GPU index %d twice", g.Index)
		}
		seen[g.Index] = true
		d, err := device(g)
		if err != nil {
			return nil, fmt.Errorf("GPU %d (%s): %w", g.Index, g.UUID, err)
		}
		out = append(out, d)
	}
	return out, nil
}

func device(g GPU) (resourceapi.Device, error) {
	mem := g.MemoryTotal / MemoryStep * MemoryStep
	switch {
	case g.UUID == "":
		return resourceapi.Device{}, fmt.Errorf("no UUID")
	case mem < 2*MemoryStep:
		return resourceapi.Device{}, fmt.Errorf("memory %d bytes: want at least 2 MiB", g.MemoryTotal)
	case g.Units < 2:
		return resourceapi.Device{}, fmt.Errorf("units total %d: want at least 2", g.Units)
	case !g.Sharing.Valid():
		return resourceapi.Device{}, fmt.Errorf("sharing mode %q: want one of %v", g.Sharing, api.SharingModes())
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrUUID:        {StringValue: ptr.To(g.UUID)},
		AttrIndex:       {IntValue: ptr.To(int64(g.Index))},
		AttrMemory:      {IntValue: ptr.To(g.MemoryTotal)},
		AttrSharing:     {StringValue: ptr.To(string(g.Sharing))},
		AttrProductName: {StringValue: ptr.To(orUnknown(g.ProductName))},
	}
	if v := semver(g.DriverVersion); v != "" {
		attrs[AttrDriverVersion] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	if v := semver(g.ComputeCapability); v != "" {
		attrs[AttrComputeCapability] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	return shareable(g.Name(), attrs, mem, g.Units, g.Taints), nil
}

// shareable is a device any number of claims may share, each consuming
// units of units and bytes of memory (all of either by default).
func shareable(name string, attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, memory, units int64,
	taints []resourceapi.DeviceTaint) resourceapi.Device {
	return resourceapi.Device{
		Name:                     name,
		Attributes:               attrs,
		AllowMultipleAllocations: ptr.To(true),
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityMemory: capacity(memory, MemoryStep),
			CapacityUnits:  capacity(units, 1),
		},
		Taints: taints,
	}
}

// capacity is a consumable capacity of total whose requests are whole steps
// from one step to total, and whose default (no request) is all of it.
func capacity(total, step int64) resourceapi.DeviceCapacity {
	q := func(v int64) *resource.Quantity { return resource.NewQuantity(v, resource.BinarySI) }
	return resourceapi.DeviceCapacity{
		Value: *q(total),
		RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    q(total),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q(step), Max: q(total), Step: q(step)},
		},
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// semver turns "580.65.06" or "9.0" into a semantic version ("580.65.6",
// "9.0.0"), the form a version attribute needs; "" when it is not one.
func semver(s string) string {
	var parts [3]uint64
	n := 0
	for i, p := 0, 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			continue
		}
		if n == 3 || i == p {
			return ""
		}
		v, err := strconv.ParseUint(s[p:i], 10, 32)
		if err != nil {
			return ""
		}
		parts[n], n, p = v, n+1, i+1
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", parts[0], parts[1], parts[2])
}
