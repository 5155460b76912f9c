package gpu

import (
	"errors"
	"fmt"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// MIGPlacement is where a GPU instance sits on its GPU, in memory slices.
type MIGPlacement struct {
	Start, Size uint32
}

// End is the first memory slice past the placement.
func (p MIGPlacement) End() uint32 { return p.Start + p.Size }

// Overlaps says whether two placements share a memory slice.
func (p MIGPlacement) Overlaps(q MIGPlacement) bool { return p.Start < q.End() && q.Start < p.End() }

// MIGProfile is one GPU instance profile of a MIG-capable GPU, as NVML
// describes it, with the placements the driver allows.
type MIGProfile struct {
	// Index is NVML's profile enum (NVML_GPU_INSTANCE_PROFILE_*), the
	// argument of nvmlDeviceGetGpuInstanceProfileInfo; ID the driver's id
	// of the profile (what an instance's info names).
	Index int
	ID    uint32
	// Name is NVIDIA's name of the profile: "<compute slices>g.<GB>gb".
	Name            string
	ComputeSlices   uint32
	MemoryMiB       uint64
	Multiprocessors uint32
	Placements      []MIGPlacement
}

// MIGInstance is one GPU instance of a GPU and its compute instance: what a
// container is given as "MIG-<uuid>".
type MIGInstance struct {
	ProfileID uint32
	Placement MIGPlacement
	GI        uint32
	// CI is the compute instance's id; HasCI false: the GPU instance has
	// none (an admin's half-made instance), and no UUID.
	CI    uint32
	HasCI bool
	UUID  string
	// MemoryBytes is the instance's memory ("" CI: 0).
	MemoryBytes uint64
}

// MIG is the part of NVML that lists, makes and destroys MIG instances.
type MIG interface {
	// MIGMode is a GPU's MIG mode now and after its next reset; a GPU
	// without MIG is an error wrapping ErrNoMIG.
	MIGMode(index int) (current, pending bool, err error)
	MIGProfiles(index int) ([]MIGProfile, error)
	MIGInstances(index int) ([]MIGInstance, error)
	// CreateMIG makes a GPU instance of the profile at the placement and
	// one compute instance over all of it.
	CreateMIG(index int, profile MIGProfile, at MIGPlacement) (MIGInstance, error)
	// DestroyMIG destroys GPU instance gi with its compute instances.
	DestroyMIG(index int, gi uint32) error
	// GPUIndex is the index NVML gives the GPU of uuid now (an index moves
	// when GPUs are added, removed or reordered); none: an error wrapping
	// ErrNoGPU.
	GPUIndex(uuid string) (int, error)
}

// ErrNoMIG is wrapped when a GPU does not support MIG.
var ErrNoMIG = errors.New("MIG not supported")

// ErrNoGPU is wrapped when no GPU of the node has a UUID.
var ErrNoGPU = errors.New("no such GPU")

func (l *lib) GPUIndex(uuid string) (int, error) {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	n, ret := l.n.DeviceGetCount()
	if err := check("device count", ret); err != nil {
		return 0, err
	}
	var errs []error
	for i := range n {
		d, err := l.handle(i)
		if err != nil {
			errs = append(errs, err) // a GPU gone from the bus: not this one to act on
			continue
		}
		u, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			errs = append(errs, check(fmt.Sprintf("device %d uuid", i), ret))
			continue
		}
		if u == uuid {
			return i, nil
		}
	}
	return 0, errors.Join(append([]error{fmt.Errorf("GPU %s: %w", uuid, ErrNoGPU)}, errs...)...)
}

// migProfileIndexes are the GPU instance profiles gpuslice offers: the plain
// ones, without the media-extension (+me), graphics and no-media variants.
var migProfileIndexes = [...]int{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, nvml.GPU_INSTANCE_PROFILE_2_SLICE,
	nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_4_SLICE, nvml.GPU_INSTANCE_PROFILE_6_SLICE,
	nvml.GPU_INSTANCE_PROFILE_7_SLICE, nvml.GPU_INSTANCE_PROFILE_8_SLICE,
}

// computeProfile is the compute instance profile that spans a GPU
// instance of n compute slices.
func computeProfile(n uint32) (int, bool) {
	p, ok := map[uint32]int{1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
		3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
		6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE, 7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
		8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE}[n]
	return p, ok
}

// MIGProfileName is NVIDIA's name of a profile of slices compute slices and
// memMiB of a GPU of totalMiB: its memory as a fraction of the GPU rounded
// up to eighths, in GB ("3g.40gb" on an H100 80GB).
func MIGProfileName(slices uint32, memMiB, totalMiB uint64) string {
	if totalMiB == 0 {
		return fmt.Sprintf("%dg.%dgb", slices, (memMiB+1023)/1024)
	}
	eighths := math.Ceil(float64(memMiB) / float64(totalMiB) * 8)
	return fmt.Sprintf("%dg.%dgb", slices, int(math.Round(eighths/8*float64(totalMiB)/1024)))
}

func (l *lib) MIGMode(index int) (bool, bool, error) {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	d, err := l.handle(index)
	if err != nil {
		return false, false, err
	}
	cur, pend, ret := d.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return false, false, fmt.Errorf("device %d: %w", index, ErrNoMIG)
	}
	if err := check(fmt.Sprintf("device %d MIG mode", index), ret); err != nil {
		return false, false, err
	}
	return cur == nvml.DEVICE_MIG_ENABLE, pend == nvml.DEVICE_MIG_ENABLE, nil
}

func (l *lib) MIGProfiles(index int) ([]MIGProfile, error) {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	d, err := l.handle(index)
	if err != nil {
		return nil, err
	}
	mem, ret := d.GetMemoryInfo()
	if err := check(fmt.Sprintf("device %d memory", index), ret); err != nil {
		return nil, err
	}
	var out []MIGProfile
	for _, pi := range migProfileIndexes {
		info, ret := d.GetGpuInstanceProfileInfo(pi)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // not a profile of this GPU
		}
		if err := check(fmt.Sprintf("device %d GPU instance profile %d", index, pi), ret); err != nil {
			return nil, err
		}
		ps, ret := d.GetGpuInstancePossiblePlacements(&info)
		if err := check(fmt.Sprintf("device %d placements of profile %d", index, info.Id), ret); err != nil {
			return nil, err
		}
		p := MIGProfile{Index: pi, ID: info.Id, ComputeSlices: info.SliceCount, MemoryMiB: info.MemorySizeMB,
			Multiprocessors: info.MultiprocessorCount,
			Name:            MIGProfileName(info.SliceCount, info.MemorySizeMB, mem.Total>>20)}
		for _, pl := range ps {
			p.Placements = append(p.Placements, MIGPlacement{Start: pl.Start, Size: pl.Size})
		}
		out = append(out, p)
	}
	return out, nil
}

func (l *lib) MIGInstances(index int) ([]MIGInstance, error) {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	d, err := l.handle(index)
	if err != nil {
		return nil, err
	}
	uuids, err := migUUIDs(d, index)
	if err != nil {
		return nil, err
	}
	var out []MIGInstance
	for _, pi := range migProfileIndexes {
		info, ret := d.GetGpuInstanceProfileInfo(pi)
		if ret != nvml.SUCCESS {
			continue
		}
		gis, ret := d.GetGpuInstances(&info)
		if err := check(fmt.Sprintf("device %d GPU instances of profile %d", index, info.Id), ret); err != nil {
			return nil, err
		}
		for _, gi := range gis {
			m, err := describe(gi, uuids)
			if err != nil {
				return nil, fmt.Errorf("device %d: %w", index, err)
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// migKey names a compute instance of a GPU: its GPU and compute instance ids.
type migKey struct{ gi, ci uint32 }

type migDev struct {
	uuid string
	mem  uint64
}

// migUUIDs lists the GPU's MIG devices (one per compute instance) by ids.
func migUUIDs(d nvml.Device, index int) (map[migKey]migDev, error) {
	n, ret := d.GetMaxMigDeviceCount()
	if err := check(fmt.Sprintf("device %d MIG device count", index), ret); err != nil {
		return nil, err
	}
	out := map[migKey]migDev{}
	for i := range n {
		m, ret := d.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // no instance at this index
		}
		if err := check(fmt.Sprintf("device %d MIG device %d", index, i), ret); err != nil {
			return nil, err
		}
		gi, ret1 := m.GetGpuInstanceId()
		ci, ret2 := m.GetComputeInstanceId()
		uuid, ret3 := m.GetUUID()
		mem, ret4 := m.GetMemoryInfo()
		if err := errors.Join(check("MIG device gpu instance id", ret1), check("MIG device compute instance id", ret2),
			check("MIG device uuid", ret3), check("MIG device memory", ret4)); err != nil {
			return nil, fmt.Errorf("device %d MIG device %d: %w", index, i, err)
		}
		out[migKey{uint32(gi), uint32(ci)}] = migDev{uuid: uuid, mem: mem.Total}
	}
	return out, nil
}

// describe is a GPU instance with its first compute instance.
func describe(gi nvml.GpuInstance, uuids map[migKey]migDev) (MIGInstance, error) {
	info, ret := gi.GetInfo()
	if err := check("GPU instance info", ret); err != nil {
		return MIGInstance{}, err
	}
	m := MIGInstance{ProfileID: info.ProfileId, GI: info.Id,
		Placement: MIGPlacement{Start: info.Placement.Start, Size: info.Placement.Size}}
	for k, dev := range uuids {
		if k.gi == info.Id && (!m.HasCI || k.ci < m.CI) {
			m.CI, m.HasCI, m.UUID, m.MemoryBytes = k.ci, true, dev.uuid, dev.mem
		}
	}
	return m, nil
}

func (l *lib) CreateMIG(index int, p MIGProfile, at MIGPlacement) (MIGInstance, error) {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	d, err := l.handle(index)
	if err != nil {
		return MIGInstance{}, err
	}
	what := fmt.Sprintf("device %d: %s at %d", index, p.Name, at.Start)
	cip, ok := computeProfile(p.ComputeSlices)
	if !ok {
		return MIGInstance{}, fmt.Errorf("%s: no compute instance profile of %d slices", what, p.ComputeSlices)
	}
	info, ret := d.GetGpuInstanceProfileInfo(p.Index)
	if err := check(what+": profile", ret); err != nil {
		return MIGInstance{}, err
	}
	gi, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: at.Start, Size: at.Size})
	if err := check(what+": create GPU instance", ret); err != nil {
		return MIGInstance{}, err
	}
	m, err := makeCompute(d, index, gi, cip)
	if err != nil {
		// Nothing half made: the compute instance (if made) and the GPU
		// instance go again.
		return MIGInstance{}, errors.Join(fmt.Errorf("%s: %w", what, err), destroyGI(gi, what))
	}
	return m, nil
}

// makeCompute makes one compute instance over all of gi and describes both.
func makeCompute(d nvml.Device, index int, gi nvml.GpuInstance, cip int) (MIGInstance, error) {
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(cip, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if err := check("compute instance profile", ret); err != nil {
		return MIGInstance{}, err
	}
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		return MIGInstance{}, check("create compute instance", ret)
	}
	uuids, err := migUUIDs(d, index)
	if err != nil {
		return MIGInstance{}, err
	}
	m, err := describe(gi, uuids)
	if err != nil {
		return MIGInstance{}, err
	}
	if !m.HasCI || m.UUID == "" {
		return MIGInstance{}, fmt.Errorf("GPU instance %d: no MIG device after its compute instance was made", m.GI)
	}
	return m, nil
}

func (l *lib) DestroyMIG(index int, giID uint32) error {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	d, err := l.handle(index)
	if err != nil {
		return err
	}
	gi, ret := d.GetGpuInstanceById(int(giID))
	if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
		return nil // already gone
	}
	if err := check(fmt.Sprintf("device %d GPU instance %d", index, giID), ret); err != nil {
		return err
	}
	return destroyGI(gi, fmt.Sprintf("device %d GPU instance %d", index, giID))
}

// destroyGI destroys gi's compute instances, then gi: NVML refuses to
// destroy a GPU instance that still holds one.
func destroyGI(gi nvml.GpuInstance, what string) error {
	for cip := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(cip, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		cis, ret := gi.GetComputeInstances(&info)
		if ret != nvml.SUCCESS {
			continue
		}
		for _, ci := range cis {
			if err := check(what+": destroy compute instance", ci.Destroy()); err != nil {
				return err
			}
		}
	}
	return check(what+": destroy GPU instance", gi.Destroy())
}
