package agent

import (
	"context"
	"fmt"
	"path/filepath"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/dra"
	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// runDRA runs the gpuslice.io DRA kubelet plugin (internal/dra) until ctx
// ends: it registers with the kubelet, publishes the node's ResourceSlice
// (one device per GPU, internal/dra/devices) and prepares claims through
// the groups manager.
func (p *parts) runDRA(ctx context.Context) error {
	cfg := p.cfg
	inject := injectFor(cfg, p.drv, p.env)
	inject.MPS = p.sh.inject()
	gpus := map[string]dra.GPU{}
	var devs []devices.GPU
	for i, g := range p.gpus {
		f := p.found[i]
		units := p.sh.unitsTotal(g.UUID)
		name := devices.Name(g.Index)
		gpus[name] = dra.GPU{UUID: g.UUID, Minor: g.Minor, MemoryBytes: int64(f.MemoryTotal) / devices.MemoryStep * devices.MemoryStep,
			Units: units, MPS: p.sh.modes[g.UUID] == api.SharingMPS, Healthy: true}
		mode := p.sh.modes[g.UUID]
		if mode == "" {
			mode = api.SharingTimeslice
		}
		devs = append(devs, devices.GPU{Index: g.Index, UUID: g.UUID, ProductName: f.Name, MemoryBytes: int64(f.MemoryTotal),
			DriverVersion: p.drv.Version, Sharing: mode, Units: units})
	}
	built, err := devices.Build(devs)
	if err != nil {
		return fmt.Errorf("DRA devices: %w", err)
	}
	d, err := dra.New(dra.Config{Pool: cfg.NodeName, GPUs: gpus, Groups: groupsOf(cfg), CDIDir: cfg.DRACDIDir,
		Checkpoint: filepath.Join(cfg.DRAPluginDir, "checkpoint.json"), Inject: inject})
	if err != nil {
		return err
	}
	h, err := kubeletplugin.Start(ctx, d, kubeletplugin.DriverName(dra.DriverName), kubeletplugin.KubeClient(p.cs),
		kubeletplugin.NodeName(cfg.NodeName), kubeletplugin.PluginDataDirectoryPath(cfg.DRAPluginDir),
		kubeletplugin.RegistrarDirectoryPath(cfg.DRARegistrarDir))
	if err != nil {
		return fmt.Errorf("DRA kubelet plugin: %w", err)
	}
	defer h.Stop()
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		cfg.NodeName: {Slices: []resourceslice.Slice{{Devices: built}}}}}
	if err := h.PublishResources(ctx, res); err != nil {
		return fmt.Errorf("DRA ResourceSlice: %w", err)
	}
	klog.FromContext(ctx).Info("DRA kubelet plugin serving", "driver", dra.DriverName, "devices", len(built),
		"pluginDir", cfg.DRAPluginDir, "cdiDir", cfg.DRACDIDir)
	<-ctx.Done()
	return nil
}
