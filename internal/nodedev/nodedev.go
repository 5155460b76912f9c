// Package nodedev is the node's one model of the devices it gives
// containers: a whole GPU, or a MIG instance of one (a profile at a
// placement, made or not yet). Each kind is one type behind Device; what
// differs between kinds (its name, what a container is given, what it
// takes of its GPU) is answered here, so a new kind is added in this
// package alone. Pure: NVML is read by the caller (internal/gpu).
package nodedev

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// Kind is a kind of device.
type Kind string

// The kinds.
const (
	KindGPU Kind = "gpu"
	KindMIG Kind = "mig"
)

// Device is one device of the node a claim or container can be given.
type Device interface {
	Kind() Kind
	// Name is the device's name on the node (its DRA device name): a DNS
	// label, unique on the node.
	Name() string
	// GPU is the physical GPU the device is, or is part of.
	GPU() GPU
	// VisibleID is what CUDA_VISIBLE_DEVICES and NVML call the device:
	// "GPU-<uuid>", "MIG-<uuid>"; "" for a MIG instance not made yet.
	VisibleID() string
	// MemoryBytes is the device's memory.
	MemoryBytes() int64
}

// GPU is a whole GPU.
type GPU struct {
	Index             int32
	UUID              string
	Minor             uint32
	ProductName       string
	MemoryTotal       int64
	ComputeCapability string
}

// FromNVML is the GPU NVML describes as d, its device node's minor minor.
func FromNVML(d gpu.Device, minor uint32) GPU {
	return GPU{Index: int32(d.Index), UUID: d.UUID, Minor: minor, ProductName: d.Name, MemoryTotal: int64(d.MemoryTotal),
		ComputeCapability: d.ComputeCapability}
}

// Kind is KindGPU.
func (g GPU) Kind() Kind { return KindGPU }

// Name is gpu-<index>.
func (g GPU) Name() string { return "gpu-" + strconv.FormatInt(int64(g.Index), 10) }

// GPU is g.
func (g GPU) GPU() GPU { return g }

// VisibleID is the GPU's UUID.
func (g GPU) VisibleID() string { return g.UUID }

// MemoryBytes is the GPU's memory.
func (g GPU) MemoryBytes() int64 { return g.MemoryTotal }

// MIG is one MIG instance of a GPU: a profile at a placement, made
// (Instance set) or to be made when a claim gets it.
type MIG struct {
	Parent    GPU
	Profile   gpu.MIGProfile
	Placement gpu.MIGPlacement
	// Instance is the instance at the placement, nil where none is made.
	Instance *gpu.MIGInstance
	// Static: made by the node's admin, not by a claim; a claim uses it and
	// never destroys it.
	Static bool
}

// Kind is KindMIG.
func (m MIG) Kind() Kind { return KindMIG }

// Name is gpu-<index>-mig-<profile, "." as "-">-<first memory slice>:
// gpu-0-mig-3g-40gb-4.
func (m MIG) Name() string {
	return MIGName(m.Parent.Index, m.Profile.Name, m.Placement.Start)
}

// MIGName is the name of the instance of profile at start on GPU index.
func MIGName(index int32, profile string, start uint32) string {
	return fmt.Sprintf("gpu-%d-mig-%s-%d", index, strings.ReplaceAll(profile, ".", "-"), start)
}

// GPU is the parent GPU.
func (m MIG) GPU() GPU { return m.Parent }

// VisibleID is the instance's MIG-<uuid> ("" when not made).
func (m MIG) VisibleID() string {
	if m.Instance == nil {
		return ""
	}
	return m.Instance.UUID
}

// MemoryBytes is the profile's memory.
func (m MIG) MemoryBytes() int64 { return int64(m.Profile.MemoryMiB) << 20 }

// MIGGPU is a GPU in MIG mode: its profiles and the instances on it.
type MIGGPU struct {
	GPU       GPU
	Profiles  []gpu.MIGProfile
	Instances []gpu.MIGInstance
}

// MemorySlices is the number of memory slices of the GPU (8 on an H100):
// the end of the furthest placement.
func (g MIGGPU) MemorySlices() uint32 {
	var n uint32
	for _, p := range g.Profiles {
		for _, pl := range p.Placements {
			n = max(n, pl.End())
		}
	}
	return n
}

// ComputeSlices is the GPU's compute slices: the largest profile's.
func (g MIGGPU) ComputeSlices() uint32 {
	var n uint32
	for _, p := range g.Profiles {
		n = max(n, p.ComputeSlices)
	}
	return n
}

// Layout is the MIG devices the node offers on g: every placement of every
// profile that no instance of the admin's (one ours does not hold) overlaps,
// the admin's instances themselves (Static, each with its compute
// instance), and where an instance ours holds is at a placement, that
// device with its Instance. ours says whether a GPU instance id was made by
// a claim.
func Layout(g MIGGPU, ours func(gi uint32) bool) []MIG {
	var foreign []gpu.MIGInstance
	byPlace := map[string]gpu.MIGInstance{}
	for _, in := range g.Instances {
		byPlace[placeKey(in.ProfileID, in.Placement)] = in
		if !ours(in.GI) {
			foreign = append(foreign, in)
		}
	}
	var out []MIG
	for _, p := range g.Profiles {
		for _, pl := range p.Placements {
			m := MIG{Parent: g.GPU, Profile: p, Placement: pl}
			if in, ok := byPlace[placeKey(p.ID, pl)]; ok {
				in := in
				m.Instance, m.Static = &in, !ours(in.GI)
			}
			if m.Static && !m.Instance.HasCI {
				continue // the admin's, half made: not offered, and nothing over it
			}
			if !m.Static && overlapsAny(pl, foreign) {
				continue
			}
			out = append(out, m)
		}
	}
	return out
}

func placeKey(profile uint32, p gpu.MIGPlacement) string {
	return fmt.Sprintf("%d@%d+%d", profile, p.Start, p.Size)
}

func overlapsAny(p gpu.MIGPlacement, ins []gpu.MIGInstance) bool {
	for _, in := range ins {
		if p.Overlaps(in.Placement) {
			return true
		}
	}
	return false
}

// Counter names (DNS labels) of a MIG GPU's counter set.
const (
	CounterComputeSlices = "compute-slices"
	counterMemorySlice   = "memory-slice-"
)

// MemorySliceCounter is the counter of memory slice i.
func MemorySliceCounter(i uint32) string {
	return counterMemorySlice + strconv.FormatUint(uint64(i), 10)
}

// CounterSetName is the name of GPU index's counter set: gpu-<index>-mig.
func CounterSetName(index int32) string { return fmt.Sprintf("gpu-%d-mig", index) }

// Counters are what a MIG GPU has for instances made by claims: one per
// memory slice no admin's instance holds (value 1) and its compute slices
// less the admin's instances'.
func Counters(g MIGGPU, ours func(gi uint32) bool) map[string]int64 {
	out := map[string]int64{}
	compute := int64(g.ComputeSlices())
	for i := range g.MemorySlices() {
		out[MemorySliceCounter(i)] = 1
	}
	for _, in := range g.Instances {
		if ours(in.GI) {
			continue
		}
		for i := in.Placement.Start; i < in.Placement.End(); i++ {
			delete(out, MemorySliceCounter(i))
		}
		for _, p := range g.Profiles {
			if p.ID == in.ProfileID {
				compute -= int64(p.ComputeSlices)
			}
		}
	}
	out[CounterComputeSlices] = max(compute, 0)
	return out
}

// Consumes is what an instance made for a claim takes of its GPU's
// counters: its memory slices and compute slices; an admin's instance
// takes none (Counters left its slices out).
func (m MIG) Consumes() map[string]int64 {
	if m.Static {
		return nil
	}
	out := map[string]int64{CounterComputeSlices: int64(m.Profile.ComputeSlices)}
	for i := m.Placement.Start; i < m.Placement.End(); i++ {
		out[MemorySliceCounter(i)] = 1
	}
	return out
}

// MIGCapNodes are the /dev/nvidia-caps nodes that give access to GPU
// instance gi and its compute instance ci on the GPU of minor gpuMinor,
// read from the driver's table (/proc/driver/nvidia-caps/mig-minors: lines
// "gpu0/gi1/access 12", "gpu0/gi1/ci0/access 13"); none where the table
// does not name them. Untrusted input: a bad line is skipped.
func MIGCapNodes(table []byte, gpuMinor, gi, ci uint32) []string {
	giKey := fmt.Sprintf("gpu%d/gi%d/access", gpuMinor, gi)
	ciKey := fmt.Sprintf("gpu%d/gi%d/ci%d/access", gpuMinor, gi, ci)
	var giNode, ciNode string
	for _, line := range strings.Split(string(table), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 20)
		if err != nil {
			continue
		}
		node := "/dev/nvidia-caps/nvidia-cap" + strconv.FormatUint(n, 10)
		switch f[0] {
		case giKey:
			giNode = node
		case ciKey:
			ciNode = node
		}
	}
	var out []string
	for _, n := range []string{giNode, ciNode} {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}
