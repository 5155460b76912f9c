package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpunoderow"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/mps"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// sharing is the node's per-GPU sharing modes and the MPS control daemons of
// its mps GPUs.
type sharing struct {
	modes          map[string]api.SharingMode // by UUID
	daemons        map[string][]*mps.Daemon   // mps GPUs' daemons, by UUID
	unitsPerClient int

	mu      sync.Mutex
	servers map[uint32]bool // the MPS servers' pids at the last measurement
}

// unitsTotal is a GPU's logical units: an mps GPU's M x N x K, else
// api.DefaultUnitsPerGPU.
func (s *sharing) unitsTotal(uuid string) int64 {
	if s == nil || s.modes[uuid] != api.SharingMPS {
		return api.DefaultUnitsPerGPU
	}
	return int64(api.MPSUnits(s.unitsPerClient, api.MPSClientLimit, len(s.daemons[uuid])))
}

// server tells whether pid is one of the node's MPS servers: the agent runs
// them, so they are no unscheduled process (on a real driver the compute list
// shows a server in place of its clients).
func (s *sharing) server(pid uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.servers[pid]
}

// newSharing reads cfg.Sharing for gpus and prepares K daemons per mps GPU.
// The control daemon is cfg.MPSControl, else the real driver's, else (on the
// simulated GPU) the simulator's stand-in next to its libraries.
func newSharing(cfg Config, drv *gpu.Driver, gpus []gpuset.GPU) (*sharing, error) {
	refs := make([]mps.GPURef, 0, len(gpus))
	for _, g := range gpus {
		refs = append(refs, mps.GPURef{Index: g.Index, UUID: g.UUID})
	}
	modes, err := mps.ParseModes(cfg.Sharing, refs)
	if err != nil {
		return nil, fmt.Errorf("--sharing: %w", err)
	}
	control := cfg.MPSControl
	if control == "" {
		control = mps.RealControl
		if drv.Simulated {
			control = filepath.Join(drv.LibDir, "gpuslice-sim-mps-control")
		}
	}
	s := &sharing{modes: modes, daemons: map[string][]*mps.Daemon{}, unitsPerClient: cfg.MPSUnitsPerClient}
	for uuid, m := range modes {
		if m != api.SharingMPS {
			continue
		}
		for k := range cfg.MPSServers {
			pipe, logd, err := mps.Layout(cfg.MPSDir, uuid, k)
			if err != nil {
				return nil, fmt.Errorf("GPU %s: %w", uuid, err)
			}
			s.daemons[uuid] = append(s.daemons[uuid], &mps.Daemon{Binary: control, UUID: uuid, PipeDir: pipe, LogDir: logd,
				Env: os.Environ(), Policy: mps.DefaultPolicy(), QuitTimeout: 5 * time.Second})
		}
	}
	return s, nil
}

// run supervises every daemon until ctx ends.
func (s *sharing) run(ctx context.Context, g *errgroup.Group) {
	for _, ds := range s.daemons {
		for _, d := range ds {
			g.Go(func() error { return d.Run(ctx) })
		}
	}
}

// inject is what the device plugin needs to make containers MPS clients.
func (s *sharing) inject() map[string]deviceplugin.MPSGPU {
	out := map[string]deviceplugin.MPSGPU{}
	for uuid, ds := range s.daemons {
		m := deviceplugin.MPSGPU{ServerUnits: api.MPSUnits(s.unitsPerClient, api.MPSClientLimit, 1)}
		for _, d := range ds {
			m.PipeDirs = append(m.PipeDirs, d.PipeDir)
		}
		out[uuid] = m
	}
	return out
}

// sharingReader adds each GPU's mode to the measurement and, on mps GPUs, the
// unit capacity (M x N x K) and the live clients, counted by the daemons.
type sharingReader struct {
	s *sharing
	r gpunoderow.GPUReader
}

func (sr sharingReader) Devices(ctx context.Context) ([]gpunoderow.Device, error) {
	clients, servers := sr.s.count(ctx)
	sr.s.mu.Lock()
	sr.s.servers = servers
	sr.s.mu.Unlock()
	devs, err := sr.r.Devices(ctx)
	if err != nil {
		return nil, err
	}
	for i := range devs {
		d := &devs[i]
		d.SharingMode = sr.s.modes[d.UUID]
		ds := sr.s.daemons[d.UUID]
		if d.SharingMode != api.SharingMPS {
			continue
		}
		d.UnitsTotal = sr.s.unitsTotal(d.UUID)
		d.MPSClientSlots, d.MPSUnitsPerClient = int32(api.MPSClientLimit*len(ds)), int32(sr.s.unitsPerClient)
		d.MPSClients = clients[d.UUID]
	}
	return devs, nil
}

// count asks every daemon for its servers and their live clients: clients
// per GPU UUID, and the servers' pids. A daemon that does not answer counts
// as full until it answers.
func (s *sharing) count(ctx context.Context) (map[string]int32, map[uint32]bool) {
	clients, servers := map[string]int32{}, map[uint32]bool{}
	for uuid, ds := range s.daemons {
		for _, dm := range ds {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ps, err := dm.Servers(cctx)
			n := 0
			if err == nil {
				n, err = dm.ClientsOf(cctx, ps)
			}
			cancel()
			if err != nil {
				klog.FromContext(ctx).Error(err, "count MPS clients", "gpu", uuid, "pipeDir", dm.PipeDir)
				n = api.MPSClientLimit
			}
			for _, p := range ps {
				servers[uint32(p)] = true
			}
			clients[uuid] += int32(n)
		}
	}
	return clients, servers
}
