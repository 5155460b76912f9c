// Package gpu is gpuslice's view of the GPUs on a machine: a small NVML
// interface owned by its users, backed by go-nvml (real driver or the
// simulated one), and the choice between them.
package gpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Device is the static description of one GPU.
type Device struct {
	Index       int
	UUID        string
	Name        string
	Minor       int
	MemoryTotal uint64
	// ComputeCapability is the CUDA compute capability, "9.0"; "" where
	// NVML does not say.
	ComputeCapability string
}

// Memory is a device's memory use in bytes.
type Memory struct {
	Total, Used, Free uint64
}

// Utilization is NVML's percentage of time the GPU (and its memory) was busy
// over the last sample period.
type Utilization struct {
	GPU, Memory uint32
}

// Process is one process with a context on a GPU, with its host PID.
type Process struct {
	PID        uint32
	UsedMemory uint64
}

// NVML is the part of NVML gpuslice uses.
type NVML interface {
	Init() error
	Shutdown() error
	DriverVersion() (string, error)
	Count() (int, error)
	Device(index int) (Device, error)
	Memory(index int) (Memory, error)
	Utilization(index int) (Utilization, error)
	Processes(index int) ([]Process, error)
}

// ErrNVML wraps every error NVML returned.
var ErrNVML = errors.New("nvml")

// ErrNotSupported is wrapped too where NVML answered NOT_SUPPORTED (e.g.
// utilization on a GPU in MIG mode, as nvml.h documents).
var ErrNotSupported = errors.New("not supported")

type lib struct{ n nvml.Interface }

// nvmlState guards go-nvml's package-level state, shared by every library
// instance in the process: an instance's Init (and its last Shutdown)
// rewrites the package's function pointers (versioned symbols, ErrorString)
// that every call through any instance reads. Init and Shutdown take it
// exclusively, every other call shared (once per exported method: a read
// lock is not taken twice). One process opens several: the time-slice
// daemon's GPU lister opens and closes the driver for each listing while its
// device-memory reader keeps its own open.
var nvmlState sync.RWMutex

// OpenNVML returns NVML backed by the library at path ("" for the default
// libnvidia-ml.so.1 lookup). Call Init before use.
func OpenNVML(path string) NVML {
	if path == "" {
		return Wrap(nvml.New())
	}
	return Wrap(nvml.New(nvml.WithLibraryPath(path)))
}

// Wrap adapts any go-nvml implementation (the real library or a mock server).
func Wrap(n nvml.Interface) NVML { return &lib{n: n} }

func check(what string, ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return fmt.Errorf("%w: %s: %s (%w)", ErrNVML, what, nvml.ErrorString(ret), ErrNotSupported)
	}
	return fmt.Errorf("%w: %s: %s", ErrNVML, what, nvml.ErrorString(ret))
}

func (l *lib) Init() error {
	nvmlState.Lock()
	defer nvmlState.Unlock()
	return check("init", l.n.Init())
}

func (l *lib) Shutdown() error {
	nvmlState.Lock()
	defer nvmlState.Unlock()
	return check("shutdown", l.n.Shutdown())
}

func (l *lib) DriverVersion() (string, error) {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	v, ret := l.n.SystemGetDriverVersion()
	return v, check("driver version", ret)
}

func (l *lib) Count() (int, error) {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	n, ret := l.n.DeviceGetCount()
	return n, check("device count", ret)
}

func (l *lib) handle(index int) (nvml.Device, error) {
	d, ret := l.n.DeviceGetHandleByIndex(index)
	if err := check(fmt.Sprintf("device %d", index), ret); err != nil {
		return nil, err
	}
	return d, nil
}

func (l *lib) Device(index int) (Device, error) {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	d, err := l.handle(index)
	if err != nil {
		return Device{}, err
	}
	out := Device{Index: index}
	var ret nvml.Return
	if out.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return Device{}, check(fmt.Sprintf("device %d uuid", index), ret)
	}
	if out.Name, ret = d.GetName(); ret != nvml.SUCCESS {
		return Device{}, check(fmt.Sprintf("device %d name", index), ret)
	}
	if out.Minor, ret = d.GetMinorNumber(); ret != nvml.SUCCESS {
		out.Minor = -1 // not every platform reports one; not fatal
	}
	if major, minor, ret := d.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		out.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return Device{}, check(fmt.Sprintf("device %d memory", index), ret)
	}
	out.MemoryTotal = mem.Total
	return out, nil
}

func (l *lib) Memory(index int) (Memory, error) {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	d, err := l.handle(index)
	if err != nil {
		return Memory{}, err
	}
	m, ret := d.GetMemoryInfo()
	if err := check(fmt.Sprintf("device %d memory", index), ret); err != nil {
		return Memory{}, err
	}
	return Memory{Total: m.Total, Used: m.Used, Free: m.Free}, nil
}

func (l *lib) Utilization(index int) (Utilization, error) {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	d, err := l.handle(index)
	if err != nil {
		return Utilization{}, err
	}
	u, ret := d.GetUtilizationRates()
	if err := check(fmt.Sprintf("device %d utilization", index), ret); err != nil {
		return Utilization{}, err
	}
	return Utilization{GPU: u.Gpu, Memory: u.Memory}, nil
}

// Processes lists the device's compute processes and its MPS clients (a real
// driver lists an MPS server in the compute list and its clients only in the
// MPS list), once per pid. A driver without the MPS list gives the compute
// list alone.
func (l *lib) Processes(index int) ([]Process, error) {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	d, err := l.handle(index)
	if err != nil {
		return nil, err
	}
	ps, ret := d.GetComputeRunningProcesses()
	if err := check(fmt.Sprintf("device %d processes", index), ret); err != nil {
		return nil, err
	}
	if more, ret := d.GetMPSComputeRunningProcesses(); ret == nvml.SUCCESS {
		ps = append(ps, more...)
	}
	out := make([]Process, 0, len(ps))
	seen := make(map[uint32]bool, len(ps))
	for _, p := range ps {
		if !seen[p.Pid] {
			seen[p.Pid] = true
			out = append(out, Process{PID: p.Pid, UsedMemory: p.UsedGpuMemory})
		}
	}
	return out, nil
}

// Devices lists every device.
func Devices(n NVML) ([]Device, error) {
	count, err := n.Count()
	if err != nil {
		return nil, err
	}
	out := make([]Device, 0, count)
	for i := 0; i < count; i++ {
		d, err := n.Device(i)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}
