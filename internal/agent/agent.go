package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
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
	"github.com/gpuslice/gpuslice/internal/groupmgr"
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
	p := &parts{cfg: cfg, cs: cs, gc: gc, drv: drv}
	mounts, err := p.openGPUs(ctx)
	if err != nil {
		return err
	}
	p.factory, p.pods = podInformer(cs, cfg.NodeName)
	p.met = newMetrics(cfg)
	rt, err := cri.Dial(cfg.RuntimeEndpoint, cfg.RuntimeTimeout)
	if err != nil {
		return err
	}
	defer func() {
		if err := rt.Close(); err != nil {
			klog.FromContext(ctx).Error(err, "close the runtime connection")
		}
	}()
	if err := p.addReconciler(mounts, rt); err != nil {
		return err
	}
	if err := p.addPlugins(env); err != nil {
		return err
	}
	if err := p.addHealth(ctx); err != nil {
		return err
	}
	p.env = env
	return p.run(ctx)
}

// parts are the agent's parts, built by Run before any of them runs.
type parts struct {
	cfg     Config
	cs      kubernetes.Interface
	gc      versioned.Interface
	drv     *gpu.Driver
	gpus    []gpuset.GPU
	found   []gpu.Device
	sh      *sharing
	factory informers.SharedInformerFactory
	pods    coreinformers.PodInformer
	met     *nodemetrics.Metrics
	rec     *reconciler
	plugins []*deviceplugin.Plugin // gpuslice.io/gpu, then the units resource
	ph      *pluginHealth
	mon     *healthMonitor
	kick    chan struct{} // publish the row now
	draKick chan struct{} // republish the ResourceSlice's taints now
	env     map[string]string
}

// openGPUs finds the GPUs, writes their CDI spec, sets up their sharing
// and finds the host's cgroup mounts.
func (p *parts) openGPUs(ctx context.Context) (hotplug.Mounts, error) {
	var err error
	if p.gpus, p.found, err = discover(ctx, p.drv.NVML); err != nil {
		return hotplug.Mounts{}, err
	}
	if err := writeCDISpec(p.cfg, p.gpus); err != nil {
		return hotplug.Mounts{}, err
	}
	if p.sh, err = newSharing(p.cfg, p.drv, p.gpus); err != nil {
		return hotplug.Mounts{}, err
	}
	mounts, err := hotplug.FindMounts(p.cfg.ProcRoot)
	if err != nil {
		return hotplug.Mounts{}, err
	}
	klog.FromContext(ctx).Info("gpuslice-node starting", "node", p.cfg.NodeName, "gpus", len(p.gpus), "simulated", p.drv.Simulated,
		"driver", p.drv.Version, "devicesV1", mounts.V1Devices, "cgroup2", mounts.V2)
	return mounts, nil
}

// podInformer watches the pods of this node.
func podInformer(cs kubernetes.Interface, node string) (informers.SharedInformerFactory, coreinformers.PodInformer) {
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + node
	}))
	return f, f.Core().V1().Pods()
}

// addReconciler makes the hot-plug reconciler, fed by the pod informer.
func (p *parts) addReconciler(mounts hotplug.Mounts, rt containerRuntime) error {
	p.rec = newReconciler(p.cfg, p.cs, p.pods.Lister(), p.gpus, mounts, rt)
	p.rec.units = p.sh.unitsTotal
	p.rec.observe = p.met.HotplugApplied
	if _, err := p.pods.Informer().AddEventHandler(p.rec.handler()); err != nil {
		return fmt.Errorf("pod handler: %w", err)
	}
	return nil
}

// addPlugins makes the device plugins of gpuslice.io/gpu and of the units
// resource, which allocates shares asked by units alone (none with the
// device plugin off: the GPUs are then offered through DRA alone).
func (p *parts) addPlugins(env map[string]string) error {
	cfg := p.cfg
	be := &backend{pods: p.pods.Lister(), client: p.cs, podSocket: cfg.PodResources, groups: groupsOf(cfg),
		units: p.sh.unitsTotal, inject: injectFor(cfg, p.drv, env)}
	if err := WritePreloadList(be.inject.Preload, cfg.Library); err != nil {
		return err
	}
	be.inject.MPS = p.sh.inject()
	if !cfg.DevicePlugin {
		return nil
	}
	plugin, err := deviceplugin.New(deviceplugin.Config{ResourceName: string(api.ResourceGPU), PluginDir: cfg.PluginDir,
		SocketName: "gpuslice.sock", SlotsPerGPU: cfg.SlotsPerGPU, CheckEvery: cfg.Resync, Observer: p.met}, be, p.gpus)
	if err != nil {
		return err
	}
	units, err := deviceplugin.New(deviceplugin.Config{ResourceName: string(api.ResourceUnits), PluginDir: cfg.PluginDir,
		SocketName: "gpuslice-units.sock", SlotsPerGPU: api.DefaultUnitsPerGPU, Units: true, CheckEvery: cfg.Resync, Observer: p.met}, be, p.gpus)
	if err != nil {
		return err
	}
	p.plugins = []*deviceplugin.Plugin{plugin, units}
	return nil
}

// addHealth makes the GPU health monitor: a change goes to the metrics and
// the device plugins, and publishes the row at once. With health checks on,
// the GPUs the XID record holds are unhealthy from the start.
func (p *parts) addHealth(ctx context.Context) error {
	for _, g := range p.gpus {
		p.met.SetHealth(g.UUID, true, "")
	}
	p.ph = &pluginHealth{gpus: p.gpus, plugins: p.plugins}
	p.kick, p.draKick = make(chan struct{}, 1), make(chan struct{}, 1)
	p.mon = newHealthMonitor(p.cfg, p.drv, p.gpus, func(changes []health.Change) {
		for _, c := range changes {
			p.met.SetHealth(c.UUID, c.Healthy, string(c.Cause))
		}
		p.ph.refresh()
		for _, k := range []chan struct{}{p.kick, p.draKick} {
			select { // publish the row and the slice now, not at the next period
			case k <- struct{}{}:
			default:
			}
		}
	})
	if !p.cfg.HealthChecks {
		return nil
	}
	p.ph.healthy = func(uuid string) bool { return p.mon.status(uuid).Healthy }
	return p.mon.restore(ctx)
}

// run runs the parts until ctx ends or one fails.
func (p *parts) run(ctx context.Context) error {
	cfg := p.cfg
	g, gctx := errgroup.WithContext(ctx)
	p.sh.run(gctx, g)
	if cfg.RunDaemon {
		g.Go(func() error { return superviseDaemon(gctx, cfg) })
	}
	if cfg.MetricsAddress != "" {
		handler := p.metricsHandler()
		g.Go(func() error { return nodemetrics.Serve(gctx, cfg.MetricsAddress, handler) })
	}
	p.factory.Start(gctx.Done())
	if !cache.WaitForCacheSync(gctx.Done(), p.pods.Informer().HasSynced) {
		return fmt.Errorf("pod informer did not sync: %w", errors.Join(ctx.Err(), g.Wait()))
	}
	g.Go(func() error { return p.rec.run(gctx) })
	for _, plugin := range p.plugins {
		g.Go(func() error { return plugin.Run(gctx) })
	}
	if cfg.HealthChecks {
		g.Go(func() error { return p.mon.run(gctx) })
	}
	if cfg.DRA {
		g.Go(func() error { return p.runDRA(gctx) })
	}
	pub := p.publisher(gctx)
	g.Go(func() error { return pub.Run(gctx) })
	return g.Wait()
}

// metricsHandler serves /metrics, /healthz and /readyz.
func (p *parts) metricsHandler() http.Handler {
	live, ready := probes(p.cfg, p.plugins, p.pods.Informer().HasSynced)
	if p.cfg.HealthChecks {
		ready = append(ready, nodemetrics.Check{Name: "gpu-health", Run: p.mon.ready})
	}
	return p.met.Handler(live, ready)
}

// publisher publishes the node's GPUNode row.
func (p *parts) publisher(ctx context.Context) *gpunoderow.Publisher {
	cfg := p.cfg
	var readHealth func(string) (bool, string)
	if cfg.HealthChecks {
		readHealth = func(uuid string) (bool, string) { st := p.mon.status(uuid); return st.Healthy, st.Reason }
	}
	pub := newPublisher(cfg, p.gc, gpunoderow.NVMLReader{NVML: p.drv.NVML, Known: p.found, Health: readHealth}, p.pods.Lister(), p.sh)
	pub.Leases = p.cs.CoordinationV1() // liveness; the row is written only when it changes
	pub.State = (&stateReader{ctx: ctx, cs: p.cs, gc: p.gc, node: cfg.NodeName}).read
	pub.Observe = p.ph.observe
	pub.Kick = p.kick
	return pub
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

// groupsOf is the groups manager of the agent's run directory.
func groupsOf(cfg Config) *groupmgr.Manager {
	return groupmgr.New(groupmgr.Config{RunDir: cfg.RunDir, ProcRoot: cfg.ProcRoot})
}

func newReconciler(cfg Config, cs kubernetes.Interface, pods listersv1.PodLister, gpus []gpuset.GPU, mounts hotplug.Mounts, rt containerRuntime) *reconciler {
	return &reconciler{client: cs, pods: pods, gpus: byUUID(gpus), managed: managedNodes(gpus), mounts: mounts,
		progs:    hotplug.NewPrograms(maxSeen),
		procRoot: cfg.ProcRoot, runtime: newKnownContainers(rt, maxSeen), resync: cfg.Resync,
		tree: group.NewTree(cfg.RunDir), groups: groupsOf(cfg), gcAge: time.Minute, seen: map[string]time.Time{},
		badShareMax: map[types.UID]string{},
		queue:       workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
}

func discover(ctx context.Context, n gpu.NVML) ([]gpuset.GPU, []gpu.Device, error) {
	count, err := n.Count()
	if err != nil {
		return nil, nil, fmt.Errorf("discover GPUs: %w", err)
	}
	out := make([]gpuset.GPU, 0, count)
	devs := make([]gpu.Device, 0, count)
	var errs []error
	for i := range count {
		d, err := n.Device(i)
		if err != nil {
			// A GPU that fell off the bus fails every query: the node's other
			// GPUs are still served, this one is not offered until a restart.
			klog.FromContext(ctx).Error(err, "GPU withheld: NVML cannot describe it", "index", i)
			errs = append(errs, err)
			continue
		}
		if d.Minor < 0 {
			return nil, nil, fmt.Errorf("GPU %d (%s): no device minor number", d.Index, d.UUID)
		}
		out = append(out, gpuset.GPU{Index: int32(d.Index), UUID: d.UUID, Minor: uint32(d.Minor), Healthy: true})
		devs = append(devs, d)
	}
	if len(out) == 0 && count > 0 {
		return nil, nil, fmt.Errorf("discover GPUs: none of %d answers NVML: %w", count, errors.Join(errs...))
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
// library and its preload list, the daemon socket, and on the simulated GPU its libraries, state
// file and GPUSLICE_SIM_* settings.
func injectFor(cfg Config, drv *gpu.Driver, env map[string]string) deviceplugin.Inject {
	in := deviceplugin.Inject{DevRoot: cfg.DevRoot, Library: cfg.Library, RunDir: cfg.RunDir, Socket: cfg.Socket, Env: map[string]string{},
		CDIKind: cfg.CDIKind, Preload: PreloadListPath(cfg)}
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
