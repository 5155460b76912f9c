package timeslice

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// knownGPUs is the set of GPUs the daemon schedules: what the driver (NVML)
// lists, never what a client sends. A UUID not in the set is looked up again
// at most once per refreshEvery (a GPU the driver shows late), then refused.
type knownGPUs struct {
	list func() ([]proto.UUID, error)
	log  klog.Logger

	// onNew is told the GPUs a listing holds that the one before did not
	// (not at the first listing); it must return at once.
	onNew func(added []proto.UUID)

	mu     sync.Mutex
	set    map[proto.UUID]bool
	listed time.Time
	err    error
}

const refreshEvery = time.Second

func newKnownGPUs(list func() ([]proto.UUID, error), log klog.Logger) *knownGPUs {
	k := &knownGPUs{list: list, log: log}
	k.refreshLocked(time.Now())
	if k.set == nil {
		k.set = map[proto.UUID]bool{}
	}
	return k
}

func (k *knownGPUs) refreshLocked(now time.Time) {
	k.listed = now
	uuids, err := k.list()
	if err != nil {
		k.err = err
		k.log.Error(err, "list GPUs (clients asking for a GPU are refused until the driver answers)")
		return
	}
	k.err = nil
	set := make(map[proto.UUID]bool, len(uuids))
	var added []proto.UUID
	for _, u := range uuids {
		if !set[u] && !k.set[u] {
			added = append(added, u)
		}
		set[u] = true
	}
	first := k.set == nil
	k.set = set
	if len(added) > 0 && !first && k.onNew != nil {
		k.onNew(added)
	}
}

// check returns nil if the daemon knows u.
func (k *knownGPUs) check(u proto.UUID) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.set[u] {
		return nil
	}
	if now := time.Now(); now.Sub(k.listed) >= refreshEvery {
		k.refreshLocked(now)
		if k.set[u] {
			return nil
		}
	}
	if k.err != nil {
		return fmt.Errorf("GPU %s: the daemon cannot list GPUs: %w", u, k.err)
	}
	return fmt.Errorf("GPU %s is not a GPU of this node (%d known)", u, len(k.set))
}

// GPUsOf lists the GPUs an NVML shows, as protocol UUIDs, and the MIG
// instances of those in MIG mode (each gated as a GPU of its own).
func GPUsOf(n gpu.NVML) ([]proto.UUID, error) {
	devs, err := gpu.Devices(n)
	if err != nil {
		return nil, fmt.Errorf("list GPUs: %w", err)
	}
	out := make([]proto.UUID, 0, len(devs))
	for _, d := range devs {
		u, err := proto.ParseUUID(d.UUID)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", d.Index, err)
		}
		out = append(out, u)
		// One GPU's MIG instances that cannot be listed cost those
		// instances alone, not the node's other GPUs.
		mig, err := migInstancesOf(n, d.Index)
		if err != nil {
			klog.Background().Error(err, "MIG instances of a GPU not listed; its instances are skipped", "gpu", d.Index, "uuid", d.UUID)
			continue
		}
		out = append(out, mig...)
	}
	return out, nil
}

// migInstancesOf are the MIG instances of GPU index, none where the GPU
// has no MIG or its MIG mode is off.
func migInstancesOf(n gpu.NVML, index int) ([]proto.UUID, error) {
	m, ok := n.(gpu.MIG)
	if !ok {
		return nil, nil
	}
	on, _, err := m.MIGMode(index)
	if errors.Is(err, gpu.ErrNoMIG) || (err == nil && !on) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ins, err := m.MIGInstances(index)
	if err != nil {
		return nil, err
	}
	var out []proto.UUID
	for _, in := range ins {
		if !in.HasCI {
			continue
		}
		u, err := proto.ParseUUID(in.UUID)
		if err != nil {
			klog.Background().Error(err, "MIG instance skipped: its UUID does not parse", "gpu", index, "gi", in.GI)
			continue
		}
		out = append(out, u)
	}
	return out, nil
}

// DriverGPUs returns a lister that opens the driver (mode, simulated GPU in
// simDir when there is no real one) for each listing and closes it again.
func DriverGPUs(mode gpu.Mode, simDir string) func() ([]proto.UUID, error) {
	return func() ([]proto.UUID, error) {
		drv, err := gpu.OpenDriver(mode, simDir)
		if err != nil {
			return nil, err
		}
		uuids, err := GPUsOf(drv.NVML)
		if serr := drv.NVML.Shutdown(); serr != nil {
			err = errors.Join(err, fmt.Errorf("close NVML: %w", serr))
		}
		return uuids, err
	}
}
