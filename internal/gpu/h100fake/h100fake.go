// Package h100fake is a fake NVML (go-nvml's mock types) of H100 80GB GPUs
// with MIG, for tests of code that lists, makes and destroys MIG instances:
// the H100 80GB's GPU instance profiles with their real placements, GPU and
// compute instances, and MIG device handles with their own UUIDs. A fake at
// the GPU only: nothing but tests uses it.
package h100fake

import (
	"fmt"
	"slices"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// TotalMiB is an H100 80GB's memory.
const TotalMiB = 81559

// Profile is one GPU instance profile of the H100 80GB.
type Profile struct {
	Index      int // NVML_GPU_INSTANCE_PROFILE_*
	ID         uint32
	Slices     uint32
	MemoryMiB  uint64
	SMs        uint32
	Placements []nvml.GpuInstancePlacement
}

func starts(size uint32, s ...uint32) []nvml.GpuInstancePlacement {
	out := make([]nvml.GpuInstancePlacement, len(s))
	for i, v := range s {
		out[i] = nvml.GpuInstancePlacement{Start: v, Size: size}
	}
	return out
}

// Profiles are the H100 80GB's profiles (nvidia-smi mig -lgip), the
// media-extension one (1g.10gb+me) included: users must skip it.
func Profiles() []Profile {
	return []Profile{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 9856, 16, starts(1, 0, 1, 2, 3, 4, 5, 6)},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1, 9856, 16, starts(1, 0, 1, 2, 3, 4, 5, 6)},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 19968, 26, starts(2, 0, 2, 4, 6)},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 19968, 32, starts(2, 0, 2, 4)},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 40192, 60, starts(4, 0, 4)},
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 40192, 64, starts(4, 0)},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 80896, 132, starts(8, 0)},
	}
}

// Server is a machine of H100 80GB GPUs.
type Server struct {
	mock.Interface
	mu          sync.Mutex
	GPUs        []*GPU
	Calls       map[string]int // NVML calls that change state, by name
	FailGI      nvml.Return    // set: CreateGpuInstanceWithPlacement fails so
	FailCI      nvml.Return    // set: CreateComputeInstance fails so
	FailMIGUUID nvml.Return    // set: a MIG device's GetUUID fails so
	uuidSeq     int
}

// GPU is one H100 of the server.
type GPU struct {
	mock.Device
	s       *Server
	index   int
	UUID    string
	MIGMode int
	gis     map[uint32]*gi
	nextGI  uint32
}

type gi struct {
	mock.GpuInstance
	g      *GPU
	info   nvml.GpuInstanceInfo
	slices uint32
	cis    map[uint32]*ci
	nextCI uint32
}

type ci struct {
	mock.ComputeInstance
	g    *gi
	id   uint32
	uuid string
	dev  *mock.Device
}

func (s *Server) failMIGUUID() nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.FailMIGUUID
}

// New returns a server of n H100s, MIG mode on where mig is true.
func New(n int, mig bool) *Server {
	s := &Server{Calls: map[string]int{}}
	for i := range n {
		g := &GPU{s: s, index: i, UUID: fmt.Sprintf("GPU-00000000-0000-0000-0000-%012d", i), gis: map[uint32]*gi{}, nextGI: 1}
		if mig {
			g.MIGMode = nvml.DEVICE_MIG_ENABLE
		}
		g.setFuncs()
		s.GPUs = append(s.GPUs, g)
	}
	s.InitFunc = func() nvml.Return { return nvml.SUCCESS }
	s.ShutdownFunc = func() nvml.Return { return nvml.SUCCESS }
	s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "580.65.06", nvml.SUCCESS }
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return len(s.GPUs), nvml.SUCCESS }
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(s.GPUs) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return s.GPUs[i], nvml.SUCCESS
	}
	return s
}

// Insert adds an H100 (MIG mode on) at index at, moving the GPUs from
// there on one index up: a GPU hot added, or the driver's order changed.
func (s *Server) Insert(at int) *GPU {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.GPUs)
	g := &GPU{s: s, index: n, UUID: fmt.Sprintf("GPU-00000000-0000-0000-0000-%012d", n), gis: map[uint32]*gi{}, nextGI: 1,
		MIGMode: nvml.DEVICE_MIG_ENABLE}
	g.setFuncs()
	s.GPUs = slices.Insert(s.GPUs, at, g)
	return g
}

// Open is the server as internal/gpu's NVML (initialized) and its MIG calls.
func (s *Server) Open() (gpu.NVML, gpu.MIG, error) {
	n := gpu.Wrap(s)
	if err := n.Init(); err != nil {
		return nil, nil, err
	}
	m, ok := n.(gpu.MIG)
	if !ok {
		return nil, nil, fmt.Errorf("internal/gpu's NVML has no MIG calls")
	}
	return n, m, nil
}

// MIGProfiles are an H100 80GB's profiles as internal/gpu reads them.
func MIGProfiles() ([]gpu.MIGProfile, error) {
	_, m, err := New(1, true).Open()
	if err != nil {
		return nil, err
	}
	return m.MIGProfiles(0)
}

// Instances is the number of GPU instances on GPU i.
func (s *Server) Instances(i int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.GPUs[i].gis)
}

func profileOf(index int) (Profile, bool) {
	for _, p := range Profiles() {
		if p.Index == index {
			return p, true
		}
	}
	return Profile{}, false
}

func (g *GPU) setFuncs() {
	g.GetUUIDFunc = func() (string, nvml.Return) { return g.UUID, nvml.SUCCESS }
	g.GetNameFunc = func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS }
	g.GetMinorNumberFunc = func() (int, nvml.Return) { return g.index, nvml.SUCCESS }
	g.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) { return 9, 0, nvml.SUCCESS }
	g.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		return nvml.Memory{Total: TotalMiB << 20, Free: TotalMiB << 20}, nvml.SUCCESS
	}
	g.GetMigModeFunc = func() (int, int, nvml.Return) { return g.MIGMode, g.MIGMode, nvml.SUCCESS }
	g.GetGpuInstanceProfileInfoFunc = g.profileInfo
	g.GetGpuInstancePossiblePlacementsFunc = placements
	g.CreateGpuInstanceWithPlacementFunc = g.create
	g.GetGpuInstancesFunc = g.instances
	g.GetGpuInstanceByIdFunc = g.instanceByID
	g.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	g.GetMigDeviceHandleByIndexFunc = g.migDeviceByIndex
}

// profileInfo is GetGpuInstanceProfileInfo: the profile at index, with MIG on.
func (g *GPU) profileInfo(index int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	p, ok := profileOf(index)
	if !ok {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	if g.MIGMode != nvml.DEVICE_MIG_ENABLE {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.GpuInstanceProfileInfo{Id: p.ID, SliceCount: p.Slices, InstanceCount: uint32(len(p.Placements)),
		MultiprocessorCount: p.SMs, MemorySizeMB: p.MemoryMiB}, nvml.SUCCESS
}

// placements is GetGpuInstancePossiblePlacements: the profile's placements.
func placements(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
	for _, p := range Profiles() {
		if p.ID == info.Id {
			return p.Placements, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_INVALID_ARGUMENT
}

// instances is GetGpuInstances: the GPU instances of a profile, by id.
func (g *GPU) instances(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
	g.s.mu.Lock()
	defer g.s.mu.Unlock()
	var out []nvml.GpuInstance
	for id := uint32(1); id < g.nextGI; id++ {
		if x, ok := g.gis[id]; ok && x.info.ProfileId == info.Id {
			out = append(out, x)
		}
	}
	return out, nvml.SUCCESS
}

// instanceByID is GetGpuInstanceById.
func (g *GPU) instanceByID(id int) (nvml.GpuInstance, nvml.Return) {
	g.s.mu.Lock()
	defer g.s.mu.Unlock()
	if x, ok := g.gis[uint32(id)]; ok {
		return x, nvml.SUCCESS
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// migDeviceByIndex is GetMigDeviceHandleByIndex: the i-th compute instance's
// MIG device, GPU instances by id, their compute instances by id.
func (g *GPU) migDeviceByIndex(i int) (nvml.Device, nvml.Return) {
	g.s.mu.Lock()
	defer g.s.mu.Unlock()
	n := 0
	for id := uint32(1); id < g.nextGI; id++ {
		x, ok := g.gis[id]
		if !ok {
			continue
		}
		for cid := uint32(0); cid < x.nextCI; cid++ {
			if c, ok := x.cis[cid]; ok {
				if n == i {
					return c.dev, nvml.SUCCESS
				}
				n++
			}
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// create makes a GPU instance where the placement is the profile's and
// free, and the GPU's 7 compute slices are not all taken.
func (g *GPU) create(info *nvml.GpuInstanceProfileInfo, at *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	g.s.mu.Lock()
	defer g.s.mu.Unlock()
	g.s.Calls["CreateGpuInstanceWithPlacement"]++
	if g.MIGMode != nvml.DEVICE_MIG_ENABLE {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if g.s.FailGI != 0 {
		return nil, g.s.FailGI
	}
	var prof *Profile
	for _, p := range Profiles() {
		if p.ID == info.Id {
			prof = &p
		}
	}
	if prof == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	valid := false
	for _, p := range prof.Placements {
		valid = valid || p == *at
	}
	if !valid {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	slices := prof.Slices
	for _, x := range g.gis {
		p := x.info.Placement
		if at.Start < p.Start+p.Size && p.Start < at.Start+at.Size {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		slices += x.slices
	}
	if slices > 7 {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	x := &gi{g: g, slices: prof.Slices, cis: map[uint32]*ci{},
		info: nvml.GpuInstanceInfo{Device: g, Id: g.nextGI, ProfileId: prof.ID, Placement: *at}}
	g.gis[x.info.Id] = x
	g.nextGI++
	x.setFuncs(prof.MemoryMiB)
	return x, nvml.SUCCESS
}

func (x *gi) setFuncs(memMiB uint64) {
	x.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) { return x.info, nvml.SUCCESS }
	x.GetComputeInstanceProfileInfoFunc = x.ciProfileInfo
	x.CreateComputeInstanceFunc = func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		return x.createCI(info, memMiB)
	}
	x.GetComputeInstancesFunc = x.computeInstances
	x.DestroyFunc = x.destroy
}

// ciProfileInfo is GetComputeInstanceProfileInfo: profiles 0-4 (1, 2, 3, 4
// and 7 slices) as far as the GPU instance's slices go, shared engines only.
func (x *gi) ciProfileInfo(p, eng int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
	slices := map[int]uint32{0: 1, 1: 2, 2: 3, 3: 4, 4: 7}[p]
	if slices == 0 || slices > x.slices || eng != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
		return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.ComputeInstanceProfileInfo{Id: uint32(p), SliceCount: slices, InstanceCount: x.slices / slices}, nvml.SUCCESS
}

// createCI is CreateComputeInstance: one compute instance of all the GPU
// instance's slices, with its MIG device of memMiB.
func (x *gi) createCI(info *nvml.ComputeInstanceProfileInfo, memMiB uint64) (nvml.ComputeInstance, nvml.Return) {
	s := x.g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Calls["CreateComputeInstance"]++
	if s.FailCI != 0 {
		return nil, s.FailCI
	}
	if len(x.cis) > 0 || info.SliceCount != x.slices {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	s.uuidSeq++
	c := &ci{g: x, id: x.nextCI, uuid: fmt.Sprintf("MIG-00000000-0000-0000-%04d-%012d", x.g.index, s.uuidSeq)}
	x.cis[c.id] = c
	x.nextCI++
	c.dev = c.migDevice(memMiB)
	c.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) {
		return nvml.ComputeInstanceInfo{Device: x.g, GpuInstance: x, Id: c.id, ProfileId: info.Id}, nvml.SUCCESS
	}
	c.DestroyFunc = c.destroy
	return c, nvml.SUCCESS
}

// migDevice is the compute instance's MIG device handle: its own UUID
// (unless the server fails MIG UUIDs), ids, memory and parent GPU.
func (c *ci) migDevice(memMiB uint64) *mock.Device {
	x, s := c.g, c.g.g.s
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) {
			if r := s.failMIGUUID(); r != 0 {
				return "", r
			}
			return c.uuid, nvml.SUCCESS
		},
		GetGpuInstanceIdFunc:                   func() (int, nvml.Return) { return int(x.info.Id), nvml.SUCCESS },
		GetComputeInstanceIdFunc:               func() (int, nvml.Return) { return int(c.id), nvml.SUCCESS },
		GetMemoryInfoFunc:                      func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: memMiB << 20}, nvml.SUCCESS },
		IsMigDeviceHandleFunc:                  func() (bool, nvml.Return) { return true, nvml.SUCCESS },
		GetDeviceHandleFromMigDeviceHandleFunc: func() (nvml.Device, nvml.Return) { return x.g, nvml.SUCCESS },
	}
}

// destroy is the compute instance's Destroy.
func (c *ci) destroy() nvml.Return {
	s := c.g.g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Calls["DestroyComputeInstance"]++
	delete(c.g.cis, c.id)
	return nvml.SUCCESS
}

// computeInstances is GetComputeInstances: the GPU instance's compute
// instance(s) of its whole size.
func (x *gi) computeInstances(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
	s := x.g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []nvml.ComputeInstance
	for _, c := range x.cis {
		if c.g == x && info.SliceCount == x.slices {
			out = append(out, c)
		}
	}
	return out, nvml.SUCCESS
}

// destroy is the GPU instance's Destroy: refused while a compute instance lives.
func (x *gi) destroy() nvml.Return {
	s := x.g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Calls["DestroyGpuInstance"]++
	if len(x.cis) > 0 {
		return nvml.ERROR_IN_USE
	}
	delete(x.g.gis, x.info.Id)
	return nvml.SUCCESS
}
