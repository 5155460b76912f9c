package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/dra"
	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/internal/nodedev"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// draGPUs are the node's GPUs as the DRA driver (by device name) and the
// slice builder (in order, with each one's position in p.gpus) know them;
// a GPU in MIG mode (mig) is offered as its MIG instances instead.
func (p *parts) draGPUs(mig migNode) (map[string]dra.GPU, []devices.GPU, []int) {
	gpus := map[string]dra.GPU{}
	var devs []devices.GPU
	var at []int
	for i, g := range p.gpus {
		if _, ok := mig.gpus[i]; ok || mig.withheld[i] {
			continue
		}
		f := p.found[i]
		units := p.sh.unitsTotal(g.UUID)
		gpus[devices.Name(g.Index)] = dra.GPU{UUID: g.UUID, Minor: g.Minor,
			MemoryBytes: int64(f.MemoryTotal) / devices.MemoryStep * devices.MemoryStep,
			Units:       units, MPS: p.sh.modes[g.UUID] == api.SharingMPS, Healthy: true}
		mode := p.sh.modes[g.UUID]
		if mode == "" {
			mode = api.SharingTimeslice
		}
		devs = append(devs, devices.GPU{GPU: nodedev.FromNVML(f, g.Minor), DriverVersion: p.drv.Version, Sharing: mode, Units: units})
		at = append(at, i)
	}
	mig.draGPUs(gpus)
	return gpus, devs, at
}

// runDRA runs the gpuslice.io DRA kubelet plugin (internal/dra) until ctx
// ends: it registers with the kubelet, publishes the node's ResourceSlice
// (one device per GPU, internal/dra/devices) and prepares claims through
// the groups manager.
func (p *parts) runDRA(ctx context.Context) error {
	cfg := p.cfg
	inject := injectFor(cfg, p.drv, p.env)
	inject.MPS = p.sh.inject()
	ckPath := filepath.Join(cfg.DRAPluginDir, "checkpoint.json")
	mig, err := p.findMIG(ctx, ckPath)
	if err != nil {
		return fmt.Errorf("DRA MIG: %w", err)
	}
	gpus, devs, at := p.draGPUs(mig)
	if _, err := devices.Build(devs); err != nil {
		return fmt.Errorf("DRA devices: %w", err)
	}
	// The kubelet makes neither directory: a fresh node has no plugin dir yet.
	for _, dir := range []string{cfg.DRAPluginDir, cfg.DRACDIDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("DRA directory: %w", err)
		}
	}
	d, err := dra.New(ctx, dra.Config{Pool: cfg.NodeName, GPUs: gpus, Groups: groupsOf(cfg), CDIDir: cfg.DRACDIDir,
		Checkpoint: ckPath, Inject: inject, Fault: dra.InjectedFault(), MIG: mig.nvml, MIGMinors: dra.MIGMinorsFile,
		Observer: p.met})
	if err != nil {
		return err
	}
	status := newClaimStatus(p.cs, d)
	go status.run(ctx)
	h, err := kubeletplugin.Start(ctx, draPlugin{Driver: d, status: status, pods: p.pods.Lister()}, kubeletplugin.DriverName(dra.DriverName), kubeletplugin.KubeClient(p.cs),
		kubeletplugin.NodeName(cfg.NodeName), kubeletplugin.PluginDataDirectoryPath(cfg.DRAPluginDir),
		kubeletplugin.RegistrarDirectoryPath(cfg.DRARegistrarDir))
	if err != nil {
		return fmt.Errorf("DRA kubelet plugin: %w", err)
	}
	defer h.Stop()
	go p.watchClaims(ctx, d)
	if len(mig.gpus) > 0 {
		go p.watchMIG(ctx, d, mig)
	}
	if cfg.HealthChecks {
		p.mon.queryAll(ctx) // the first slice already withholds a GPU that fails NVML (one lost before a restart)
	}
	t := newDRATaints(p)
	publish := func(taints [][]resourceapi.DeviceTaint) error {
		built, names, byName, err := draDevices(mig, devs, at, taints)
		if err != nil {
			return err
		}
		status.setTaints(names, byName)
		res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{cfg.NodeName: {Slices: built}}}
		if err := h.PublishResources(ctx, res); err != nil {
			return fmt.Errorf("DRA ResourceSlice: %w", err)
		}
		return nil
	}
	taints, _ := t.update()
	if err := publish(taints); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("DRA kubelet plugin serving", "driver", dra.DriverName, "devices", len(gpus),
		"pluginDir", cfg.DRAPluginDir, "cdiDir", cfg.DRACDIDir)
	return t.run(ctx, publish)
}

// draDevices are the node's ResourceSlices: its whole GPUs (devs, each at
// its position at[j] in p.gpus) and its MIG GPUs' counter sets and
// devices, each GPU's devices with its taints (ts, by position); the
// device names with their taints besides.
func draDevices(mig migNode, devs []devices.GPU, at []int, ts [][]resourceapi.DeviceTaint) ([]resourceslice.Slice, []string, [][]resourceapi.DeviceTaint, error) {
	var names []string
	var byName [][]resourceapi.DeviceTaint
	for j := range devs {
		devs[j].Taints = ts[at[j]]
		names, byName = append(names, devices.Name(devs[j].Index)), append(byName, ts[at[j]])
	}
	whole, err := devices.Build(devs)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("DRA devices: %w", err)
	}
	sets, migDevs, migNames, err := mig.build(ts)
	if err != nil {
		return nil, nil, nil, err
	}
	for i, ns := range migNames {
		for _, n := range ns {
			names, byName = append(names, n), append(byName, ts[i])
		}
	}
	return devices.Slices(append(whole, migDevs...), sets), names, byName, nil
}
