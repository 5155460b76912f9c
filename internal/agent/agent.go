package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/cri"
	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpunoderow"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/health"
	"github.com/gpuslice/gpuslice/internal/hotplug"
	"github.com/gpuslice/gpuslice/internal/nodemetrics"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/generated/clientset/versioned"
)

// Run runs the agent until ctx ends or a part fails.
func Run(ctx context.Context, cfg Config, env map[string]string) (err error) {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cs, gc, err := clients(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	drv, err := gpu.OpenDriver(cfg.Driver, cfg.SimDir)
	if err != nil {
		return fmt.Errorf("GPU driver: %w", err)
	}
	defer func() {
		if serr := drv.NVML.Shutdown(); serr != nil {
			err = errors.Join(err, fmt.Errorf("close NVML: %w", serr))
		}
	}()
	gpus, found, err := discover(drv.NVML)
	if err != nil {
		return err
	}
	if err := writeCDISpec(cfg, gpus); err != nil {
		return err
	}
	sh, err := newSharing(cfg, drv, gpus)
	if err != nil {
		return err
	}
	mounts, err := hotplug.FindMounts(cfg.ProcRoot)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("gpuslice-node starting", "node", cfg.NodeName, "gpus", len(gpus), "simulated", drv.Simulated,
		"driver", drv.Version, "devicesV1", mounts.V1Devices, "cgroup2", mounts.V2)

	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + cfg.NodeName
	}))
	pods := f.Core().V1().Pods()
	met := newMetrics(cfg)
	rt, err := cri.Dial(cfg.RuntimeEndpoint, cfg.RuntimeTimeout)
	if err != nil {
		return err
	}
	defer func() {
		if err := rt.Close(); err != nil {
			klog.FromContext(ctx).Error(err, "close the runtime connection")
		}
	}()
	rec := newReconciler(cfg, cs, pods.Lister(), gpus, mounts, rt)
	rec.observe = met.HotplugApplied
	if _, err := pods.Informer().AddEventHandler(rec.handler()); err != nil {
		return fmt.Errorf("pod handler: %w", err)
	}
	be := &backend{pods: pods.Lister(), client: cs, podSocket: cfg.PodResources, tree: group.NewTree(cfg.RunDir),
		procRoot: cfg.ProcRoot, inject: injectFor(cfg, drv, env)}
	be.inject.MPS = sh.inject()
	plugin, err := deviceplugin.New(deviceplugin.Config{ResourceName: string(api.ResourceGPU), PluginDir: cfg.PluginDir,
		SocketName: "gpuslice.sock", SlotsPerGPU: cfg.SlotsPerGPU, CheckEvery: cfg.Resync, Observer: met}, be, gpus)
	if err != nil {
		return err
	}
	// Shares asked by units alone (no gpuslice.io/gpu) are allocated
	// through the units resource.
	units, err := deviceplugin.New(deviceplugin.Config{ResourceName: string(api.ResourceUnits), PluginDir: cfg.PluginDir,
		SocketName: "gpuslice-units.sock", SlotsPerGPU: api.DefaultUnitsPerGPU, Units: true, CheckEvery: cfg.Resync, Observer: met}, be, gpus)
	if err != nil {
		return err
	}
	for _, g := range gpus {
		met.SetHealth(g.UUID, true, "")
	}
	ph := &pluginHealth{gpus: gpus, plugins: []*deviceplugin.Plugin{plugin, units}}
	kick := make(chan struct{}, 1)
	mon := newHealthMonitor(cfg, drv, gpus, func(changes []health.Change) {
		for _, c := range changes {
			met.SetHealth(c.UUID, c.Healthy, string(c.Cause))
		}
		ph.refresh()
		select { // publish the row now, not at the next period
		case kick <- struct{}{}:
		default:
		}
	})
	if cfg.HealthChecks {
		ph.healthy = func(uuid string) bool { return mon.status(uuid).Healthy }
	}

	g, gctx := errgroup.WithContext(ctx)
	sh.run(gctx, g)
	if cfg.RunDaemon {
		g.Go(func() error { return superviseDaemon(gctx, cfg) })
	}
	if cfg.MetricsAddress != "" {
		live, ready := probes(cfg, []*deviceplugin.Plugin{plugin, units}, pods.Informer().HasSynced)
		if cfg.HealthChecks {
			ready = append(ready, nodemetrics.Check{Name: "gpu-health", Run: mon.ready})
		}
		g.Go(func() error { return nodemetrics.Serve(gctx, cfg.MetricsAddress, met.Handler(live, ready)) })
	}
	f.Start(gctx.Done())
	if !cache.WaitForCacheSync(gctx.Done(), pods.Informer().HasSynced) {
		return fmt.Errorf("pod informer did not sync: %w", errors.Join(ctx.Err(), g.Wait()))
	}
	g.Go(func() error { return rec.run(gctx) })
	g.Go(func() error { return plugin.Run(gctx) })
	g.Go(func() error { return units.Run(gctx) })
	if cfg.HealthChecks {
		g.Go(func() error { return mon.run(gctx) })
	}
	var readHealth func(string) (bool, string)
	if cfg.HealthChecks {
		readHealth = func(uuid string) (bool, string) { st := mon.status(uuid); return st.Healthy, st.Reason }
	}
	pub := newPublisher(cfg, gc, gpunoderow.NVMLReader{NVML: drv.NVML, Known: found, Health: readHealth}, pods.Lister(), sh)
	pub.Leases = cs.CoordinationV1() // liveness; the row is written only when it changes
	pub.State = (&stateReader{ctx: gctx, cs: cs, gc: gc, node: cfg.NodeName}).read
	pub.Observe = ph.observe
	pub.Kick = kick
	g.Go(func() error { return pub.Run(gctx) })
	return g.Wait()
}

// clients connect to the API server.
func clients(kubeconfig string) (kubernetes.Interface, versioned.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig: %w", err)
	}
	// Reports follow every device change; the default 5 QPS would queue
	// the next change behind them.
	rc.QPS, rc.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %w", err)
	}
	gc, err := versioned.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("GPUNode client: %w", err)
	}
	return cs, gc, nil
}

func newReconciler(cfg Config, cs kubernetes.Interface, pods listersv1.PodLister, gpus []gpuset.GPU, mounts hotplug.Mounts, rt containerRuntime) *reconciler {
	return &reconciler{client: cs, pods: pods, gpus: byUUID(gpus), managed: managedNodes(gpus), mounts: mounts,
		progs:    hotplug.NewPrograms(maxSeen),
		procRoot: cfg.ProcRoot, runtime: newKnownContainers(rt, maxSeen), resync: cfg.Resync,
		tree: group.NewTree(cfg.RunDir), gcAge: time.Minute, seen: map[string]time.Time{},
		badShareMax: map[types.UID]string{},
		queue:       workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
}

func discover(n gpu.NVML) ([]gpuset.GPU, []gpu.Device, error) {
	devs, err := gpu.Devices(n)
	if err != nil {
		return nil, nil, fmt.Errorf("discover GPUs: %w", err)
	}
	out := make([]gpuset.GPU, 0, len(devs))
	for _, d := range devs {
		if d.Minor < 0 {
			return nil, nil, fmt.Errorf("GPU %d (%s): no device minor number", d.Index, d.UUID)
		}
		out = append(out, gpuset.GPU{Index: int32(d.Index), UUID: d.UUID, Minor: uint32(d.Minor), Healthy: true})
	}
	return out, devs, nil
}

func byUUID(gpus []gpuset.GPU) map[string]gpuset.GPU {
	m := make(map[string]gpuset.GPU, len(gpus))
	for _, g := range gpus {
		m[g.UUID] = g
	}
	return m
}

// injectFor says what containers get: control devices that exist, the
// library, the daemon socket, and on the simulated GPU its libraries, state
// file and GPUSLICE_SIM_* settings.
func injectFor(cfg Config, drv *gpu.Driver, env map[string]string) deviceplugin.Inject {
	in := deviceplugin.Inject{DevRoot: cfg.DevRoot, Library: cfg.Library, RunDir: cfg.RunDir, Socket: cfg.Socket, Env: map[string]string{},
		CDIKind: cfg.CDIKind}
	for _, d := range cfg.ControlDevices {
		if _, err := os.Stat(d); err == nil {
			in.ControlDevices = append(in.ControlDevices, d)
		}
	}
	if drv.Simulated {
		in.SimDir = drv.LibDir
		for k, v := range env {
			if len(k) > len("GPUSLICE_SIM_") && k[:len("GPUSLICE_SIM_")] == "GPUSLICE_SIM_" && k != "GPUSLICE_SIM_STATE" && k != "GPUSLICE_SIM_DEVDIR" && k != "GPUSLICE_SIM_HOST_PROC" {
				in.Env[k] = v
			}
		}
		// Like the real driver, the simulator then shows a process only
		// the GPUs whose nodes it can open (hot add/remove included).
		in.Env["GPUSLICE_SIM_DEVNODES"] = "1"
		// Like the kernel driver, the simulator names processes by their
		// host pid: it finds it in the host's /proc.
		in.SimHostProc = cfg.ProcRoot
		in.SimState = env["GPUSLICE_SIM_STATE"]
		if in.SimState == "" {
			in.SimState = fmt.Sprintf("/dev/shm/gpuslice-sim-%d", os.Getuid())
		}
	}
	return in
}
