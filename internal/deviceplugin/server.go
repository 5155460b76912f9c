package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuslice/gpuslice/internal/gpuset"
)

// Config is the plugin's configuration.
type Config struct {
	ResourceName string
	// PluginDir holds the kubelet's registration socket and ours.
	PluginDir  string
	SocketName string
	// SlotsPerGPU is how many containers may hold one GPU at once (in
	// Units mode: the GPU's units).
	SlotsPerGPU int
	// Units: the resource counts units of a GPU (see ResolveUnits), not
	// GPUs.
	Units bool
	// CheckEvery is how often the plugin checks that the kubelet still
	// knows it (a restarted kubelet wipes the plugin directory).
	CheckEvery time.Duration
	// Observer is told the outcome of each Allocate (nil: nobody).
	Observer Observer
}

// Observer is told the outcome of each container's Allocate.
type Observer interface {
	AllocateRefused(reason string)
	Allocated()
}

// Allocate refusal reasons given to the Observer.
const (
	RefusedPending   = "pending"   // the kubelet's or API server's records could not be read
	RefusedUnmatched = "unmatched" // no single waiting container matches the request
	RefusedDevices   = "devices"   // the kubelet's device IDs do not match the assignment
	RefusedPrepare   = "prepare"   // the group or the answer could not be made (an unhealthy GPU included)
)

// RefusalReasons lists every refusal reason.
func RefusalReasons() []string {
	return []string{RefusedPending, RefusedUnmatched, RefusedDevices, RefusedPrepare}
}

// Validate checks c.
func (c Config) Validate() error {
	switch {
	case c.ResourceName == "" || c.PluginDir == "" || c.SocketName == "":
		return errors.New("device plugin: resource name, plugin directory and socket name are required")
	case c.SlotsPerGPU < 1 || c.SlotsPerGPU > MaxSlotsPerGPU:
		return fmt.Errorf("device plugin: slots per GPU %d, want 1..%d", c.SlotsPerGPU, MaxSlotsPerGPU)
	case c.CheckEvery <= 0:
		return errors.New("device plugin: check interval must be positive")
	}
	return nil
}

// Backend is the node agent's side of the plugin.
type Backend interface {
	// Pending lists the containers waiting for devices, as the kubelet
	// records them at the time of the call (see Candidates).
	// resource is the plugin's resource name.
	Pending(ctx context.Context, resource string) ([]Candidate, error)
	// Prepare readies c's group on the node and returns c's answer.
	Prepare(ctx context.Context, c Candidate, gpus map[string]gpuset.GPU) (*pluginapi.ContainerAllocateResponse, error)
}

// Plugin is the device plugin gRPC service.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	cfg     Config
	backend Backend

	mu      sync.Mutex
	gpus    []gpuset.GPU
	changed chan struct{} // closed when gpus change

	registered atomic.Bool
}

// Registered says whether the plugin is registered with the kubelet and
// serving.
func (p *Plugin) Registered() bool { return p.registered.Load() }

func (p *Plugin) refused(reason string) {
	if p.cfg.Observer != nil {
		p.cfg.Observer.AllocateRefused(reason)
	}
}

// New returns a plugin advertising gpus.
func New(cfg Config, backend Backend, gpus []gpuset.GPU) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Plugin{cfg: cfg, backend: backend, gpus: append([]gpuset.GPU(nil), gpus...), changed: make(chan struct{})}, nil
}

// SetGPUs replaces the advertised GPUs (health changes); ListAndWatch
// streams send the new list.
func (p *Plugin) SetGPUs(gpus []gpuset.GPU) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gpus = append([]gpuset.GPU(nil), gpus...)
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Plugin) snapshot() ([]gpuset.GPU, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gpus, p.changed
}

func (p *Plugin) gpuMap() map[string]gpuset.GPU {
	gpus, _ := p.snapshot()
	m := make(map[string]gpuset.GPU, len(gpus))
	for _, g := range gpus {
		m[g.UUID] = g
	}
	return m
}

// Devices lists the slots of gpus as device plugin devices.
func Devices(gpus []gpuset.GPU, slots int) []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(gpus)*slots)
	for _, g := range gpus {
		health := pluginapi.Healthy
		if !g.Healthy {
			health = pluginapi.Unhealthy
		}
		for k := range slots {
			out = append(out, &pluginapi.Device{ID: SlotID(g.UUID, k), Health: health})
		}
	}
	return out
}

// GetDevicePluginOptions implements the device plugin API.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the slots now and whenever the GPUs change.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		gpus, changed := p.snapshot()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: Devices(gpus, p.cfg.SlotsPerGPU)}); err != nil {
			return fmt.Errorf("list and watch: %w", err)
		}
		select {
		case <-changed:
		case <-s.Context().Done():
			return nil
		}
	}
}

// GetPreferredAllocation picks one slot on each GPU assigned to the
// container being allocated.
func (p *Plugin) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	log := klog.FromContext(ctx)
	out := &pluginapi.PreferredAllocationResponse{}
	for _, r := range req.ContainerRequests {
		cands, err := p.backend.Pending(ctx, p.cfg.ResourceName)
		if err != nil {
			return nil, fmt.Errorf("preferred allocation: %w", err)
		}
		c, err := p.resolve(cands, int(r.AllocationSize))
		if err != nil {
			log.Error(err, "preferred allocation refused", "resource", p.cfg.ResourceName, "size", r.AllocationSize)
			return nil, err
		}
		var ids []string
		if p.cfg.Units {
			ids, err = PreferUnits(c, r.AvailableDeviceIDs, r.MustIncludeDeviceIDs, int(r.AllocationSize))
		} else {
			ids, err = Prefer(c, r.AvailableDeviceIDs, r.MustIncludeDeviceIDs)
		}
		if err != nil {
			log.Error(err, "preferred allocation refused", "container", c.String())
			return nil, err
		}
		log.V(2).Info("preferred allocation", "container", c.String(), "deviceIDs", ids)
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return out, nil
}

// Allocate ties the kubelet's device IDs to the assignment of the one
// container waiting for them and answers with exactly its GPUs.
func (p *Plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	log := klog.FromContext(ctx)
	out := &pluginapi.AllocateResponse{}
	for _, r := range req.ContainerRequests {
		cands, err := p.backend.Pending(ctx, p.cfg.ResourceName)
		if err != nil {
			p.refused(RefusedPending)
			return nil, fmt.Errorf("allocate: %w", err)
		}
		c, err := p.resolve(cands, len(r.DevicesIds))
		if err != nil {
			p.refused(RefusedUnmatched)
			log.Error(err, "allocation refused", "deviceIDs", r.DevicesIds)
			return nil, err
		}
		if p.cfg.Units {
			err = TieUnits(c, r.DevicesIds)
		} else {
			err = Tie(c, r.DevicesIds)
		}
		if err != nil {
			p.refused(RefusedDevices)
			log.Error(err, "allocation refused", "deviceIDs", r.DevicesIds)
			return nil, err
		}
		resp, err := p.backend.Prepare(ctx, c, p.gpuMap())
		if err != nil {
			p.refused(RefusedPrepare)
			log.Error(err, "allocation failed", "container", c.String())
			return nil, fmt.Errorf("allocate %s: %w", c, err)
		}
		if p.cfg.Observer != nil {
			p.cfg.Observer.Allocated()
		}
		log.Info("allocated", "resource", p.cfg.ResourceName, "pod", c.Namespace+"/"+c.Name, "uid", c.UID, "container", c.Container, "deviceIDs", r.DevicesIds)
		out.ContainerResponses = append(out.ContainerResponses, resp)
	}
	return out, nil
}

func (p *Plugin) resolve(cands []Candidate, size int) (Candidate, error) {
	if p.cfg.Units {
		return ResolveUnits(cands, size)
	}
	return Resolve(cands, size)
}

// PreStartContainer is not requested (see GetDevicePluginOptions).
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// Run serves the plugin and keeps it registered with the kubelet until ctx
// ends: when the kubelet restarts (its socket changes or ours is wiped) the
// plugin serves again and re-registers.
func (p *Plugin) Run(ctx context.Context) error {
	log := klog.FromContext(ctx)
	for ctx.Err() == nil {
		err := p.serveOnce(ctx)
		if err != nil {
			log.Error(err, "device plugin", "retryIn", p.cfg.CheckEvery)
			select {
			case <-ctx.Done():
			case <-time.After(p.cfg.CheckEvery):
			}
		}
	}
	return nil
}

func (p *Plugin) serveOnce(ctx context.Context) error {
	log := klog.FromContext(ctx)
	sock := filepath.Join(p.cfg.PluginDir, p.cfg.SocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(func(c context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(klog.NewContext(c, log), req)
	}))
	pluginapi.RegisterDevicePluginServer(srv, p)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Error(err, "device plugin server")
		}
	}()
	kubelet := filepath.Join(p.cfg.PluginDir, filepath.Base(pluginapi.KubeletSocket))
	kubeletIno := inode(kubelet)
	if err := p.register(ctx, kubelet); err != nil {
		return err
	}
	log.Info("registered with the kubelet", "resource", p.cfg.ResourceName, "socket", sock)
	p.registered.Store(true)
	defer p.registered.Store(false)
	ours := inode(sock)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			served <- err
			return fmt.Errorf("device plugin server stopped: %w", err)
		case <-time.After(p.cfg.CheckEvery):
		}
		if inode(sock) != ours || inode(kubelet) != kubeletIno {
			log.Info("kubelet restarted; registering again")
			return nil
		}
	}
}

func (p *Plugin) register(ctx context.Context, kubelet string) error {
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("kubelet registration: %w", err)
	}
	defer func() { _ = conn.Close() }() // the call's result is what matters
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: p.cfg.SocketName, ResourceName: p.cfg.ResourceName,
		Options: &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		return fmt.Errorf("register with the kubelet at %s: %w", kubelet, err)
	}
	return nil
}

// inode identifies a file (0 when it does not exist).
func inode(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// ResourceName is the extended resource the plugin advertises.
func (p *Plugin) ResourceName() string { return p.cfg.ResourceName }
