// Command gpuslice-node is the gpuslice node agent: time-slice daemon, kubelet
// device plugin, resource-table publisher and GPU hot-plug reconciler
// (internal/agent).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/health"
	"github.com/gpuslice/gpuslice/internal/logflags"
	"github.com/gpuslice/gpuslice/internal/version"
)

func main() {
	env := environ()
	o := newOptions(agent.DefaultConfig(func(k string) string { return env[k] }))
	if err := o.fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *o.showVersion {
		fmt.Println(version.String("gpuslice-node"))
		return
	}
	cfg, err := o.config()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpuslice-node: %v\n", err)
		os.Exit(2)
	}
	os.Exit(run(cfg, env, *o.install))
}

// environ is the process environment as a map.
func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// options are the command line: the agent's configuration, filled in by
// Parse, and the flags that need converting into it.
type options struct {
	fs          *flag.FlagSet
	cfg         agent.Config
	logCfg      *logflags.Config
	driver      *string
	control     *string
	skipXIDs    *string
	install     *string
	showVersion *bool
}

// newOptions registers every flag, with cfg's values as defaults.
func newOptions(cfg agent.Config) *options {
	o := &options{fs: flag.NewFlagSet("gpuslice-node", flag.ExitOnError), cfg: cfg}
	fs, c := o.fs, &o.cfg
	o.logCfg = logflags.AddGoFlags(fs)
	o.driver = fs.String("driver", string(c.Driver), "GPU driver: auto, real or sim")
	o.control = fs.String("control-devices", strings.Join(c.ControlDevices, ","), "driver-wide device nodes given to GPU containers")
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "this node's name (default $NODE_NAME)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig (default: in-cluster or $KUBECONFIG)")
	fs.StringVar(&c.SimDir, "sim-dir", c.SimDir, "directory of the simulated driver libraries")
	fs.StringVar(&c.Library, "library", c.Library, "host path of libgpuslice.so to inject")
	fs.StringVar(&c.RunDir, "run-dir", c.RunDir, "node daemon run directory")
	fs.StringVar(&c.Socket, "socket", c.Socket, "node daemon socket")
	fs.BoolVar(&c.RunDaemon, "daemon", c.RunDaemon, "run the node daemon (a child process, started again at once if it dies)")
	fs.StringVar(&c.DaemonBinary, "daemon-binary", c.DaemonBinary, "the gpuslice CLI that runs the node daemon (default: gpuslice beside this executable)")
	fs.StringVar(&c.PluginDir, "plugin-dir", c.PluginDir, "kubelet device plugin directory")
	fs.StringVar(&c.PodResources, "pod-resources", c.PodResources, "kubelet pod-resources socket")
	fs.StringVar(&c.DevRoot, "dev-root", c.DevRoot, "host directory of the nvidia<N> device nodes")
	fs.IntVar(&c.SlotsPerGPU, "slots-per-gpu", c.SlotsPerGPU, "slots of gpuslice.io/gpu per GPU (at least the scheduler's 100 containers per GPU)")
	fs.DurationVar(&c.Resync, "resync", c.Resync, "re-apply every container's devices this often")
	fs.DurationVar(&c.PublishPeriod, "publish-period", c.PublishPeriod, "publish the node's GPUNode row this often")
	fs.StringVar(&c.RuntimeEndpoint, "runtime-endpoint", c.RuntimeEndpoint, "the container runtime's CRI socket (containerd, CRI-O): running containers' processes and OCI specs")
	fs.DurationVar(&c.RuntimeTimeout, "runtime-timeout", c.RuntimeTimeout, "give up a CRI call after this long")
	fs.String("cgroup-root", "", "deprecated, ignored: containers are found through the CRI (--runtime-endpoint)")
	o.showVersion = fs.Bool("version", false, "print the version and exit")
	o.install = fs.String("install-library", "", "copy this libgpuslice.so to --library at start (and remove it at exit when no GPU pod is left)")
	fs.String("runtime-state-dir", "", "deprecated, ignored: containers' OCI specs come from the CRI (--runtime-endpoint)")
	o.addSharingFlags()
	return o
}

// addSharingFlags registers the flags of GPU sharing (time slices, MPS),
// CDI, metrics and health checks.
func (o *options) addSharingFlags() {
	fs, c := o.fs, &o.cfg
	fs.StringVar(&c.Sharing, "sharing", c.Sharing, "GPU sharing mode: timeslice or mps for every GPU, or <index|uuid>=<mode>,...")
	fs.StringVar(&c.MPSControl, "mps-control", c.MPSControl, "MPS control daemon (default nvidia-cuda-mps-control; on the simulated GPU its stand-in)")
	fs.StringVar(&c.MPSDir, "mps-dir", c.MPSDir, "directory of the MPS daemons' per-GPU pipe and log directories")
	fs.IntVar(&c.MPSServers, "mps-servers", c.MPSServers, "MPS servers per mps GPU (K)")
	fs.IntVar(&c.MPSUnitsPerClient, "mps-units-per-client", c.MPSUnitsPerClient, "units per MPS client slot (M); an mps GPU has M x 48 x K units")
	fs.StringVar(&c.CDIKind, "cdi-kind", c.CDIKind, "CDI kind of the GPU devices named in Allocate: gpuslice.io/gpu (write the spec into --cdi-spec-dir), nvidia.com/gpu (the NVIDIA toolkit's spec) or \"\" (none)")
	fs.StringVar(&c.CDISpecDir, "cdi-spec-dir", c.CDISpecDir, "where the gpuslice.io/gpu CDI spec is written")
	fs.StringVar(&c.MetricsAddress, "metrics-address", c.MetricsAddress, "serve /metrics, /healthz and /readyz on this address (\"\": off)")
	fs.IntVar(&c.MetricsMaxGroups, "metrics-max-groups", c.MetricsMaxGroups, "most groups per GPU with metric series of their own (the rest: group=\"_other\")")
	fs.BoolVar(&c.HealthChecks, "health-checks", c.HealthChecks, "withdraw GPUs that report a critical XID (NVML events) or fail NVML queries")
	fs.DurationVar(&c.HealthPeriod, "health-period", c.HealthPeriod, "query each GPU's health this often")
	o.skipXIDs = fs.String("health-skip-xids", "", "comma-separated XIDs that do not withdraw a GPU (beyond the application XIDs 13,31,43,45,68,109)")
}

// config converts the parsed flags into the agent's configuration and
// applies the logging flags.
func (o *options) config() (agent.Config, error) {
	cfg := o.cfg
	mode, err := gpu.ParseMode(*o.driver)
	if err == nil {
		err = logflags.Apply(o.logCfg)
	}
	if err != nil {
		return cfg, err
	}
	cfg.Driver = mode
	if cfg.HealthSkipXIDs, err = health.ParseXIDs(*o.skipXIDs); err != nil {
		return cfg, fmt.Errorf("--health-skip-xids: %w", err)
	}
	cfg.ControlDevices = nil
	for _, d := range strings.Split(*o.control, ",") {
		if d = strings.TrimSpace(d); d != "" {
			cfg.ControlDevices = append(cfg.ControlDevices, d)
		}
	}
	return cfg, nil
}

// run runs the agent until SIGTERM or SIGINT and returns the exit code.
func run(cfg agent.Config, env map[string]string, install string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	klog.Background().Info("starting gpuslice-node", "version", version.Get(), "node", cfg.NodeName, "driver", cfg.Driver)
	var err error
	if install != "" {
		err = agent.RunInstalled(ctx, cfg, env, install)
	} else {
		err = agent.Run(ctx, cfg, env)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "gpuslice-node")
	}
	klog.Flush()
	if err != nil {
		return 1
	}
	return 0
}
