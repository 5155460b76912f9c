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
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	cfg := agent.DefaultConfig(func(k string) string { return env[k] })
	fs := flag.NewFlagSet("gpuslice-node", flag.ExitOnError)
	logCfg := logflags.AddGoFlags(fs)
	driver := fs.String("driver", string(cfg.Driver), "GPU driver: auto, real or sim")
	control := fs.String("control-devices", strings.Join(cfg.ControlDevices, ","), "driver-wide device nodes given to GPU containers")
	fs.StringVar(&cfg.NodeName, "node-name", cfg.NodeName, "this node's name (default $NODE_NAME)")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig (default: in-cluster or $KUBECONFIG)")
	fs.StringVar(&cfg.SimDir, "sim-dir", cfg.SimDir, "directory of the simulated driver libraries")
	fs.StringVar(&cfg.Library, "library", cfg.Library, "host path of libgpuslice.so to inject")
	fs.StringVar(&cfg.RunDir, "run-dir", cfg.RunDir, "node daemon run directory")
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "node daemon socket")
	fs.BoolVar(&cfg.RunDaemon, "daemon", cfg.RunDaemon, "run the node daemon (a child process, started again at once if it dies)")
	fs.StringVar(&cfg.DaemonBinary, "daemon-binary", cfg.DaemonBinary, "the gpuslice CLI that runs the node daemon (default: gpuslice beside this executable)")
	fs.StringVar(&cfg.PluginDir, "plugin-dir", cfg.PluginDir, "kubelet device plugin directory")
	fs.StringVar(&cfg.PodResources, "pod-resources", cfg.PodResources, "kubelet pod-resources socket")
	fs.StringVar(&cfg.DevRoot, "dev-root", cfg.DevRoot, "host directory of the nvidia<N> device nodes")
	fs.IntVar(&cfg.SlotsPerGPU, "slots-per-gpu", cfg.SlotsPerGPU, "slots of gpuslice.io/gpu per GPU (at least the scheduler's 100 containers per GPU)")
	fs.DurationVar(&cfg.Resync, "resync", cfg.Resync, "re-apply every container's devices this often")
	fs.DurationVar(&cfg.PublishPeriod, "publish-period", cfg.PublishPeriod, "publish the node's GPUNode row this often")
	fs.StringVar(&cfg.RuntimeEndpoint, "runtime-endpoint", cfg.RuntimeEndpoint, "the container runtime's CRI socket (containerd, CRI-O): running containers' processes and OCI specs")
	fs.DurationVar(&cfg.RuntimeTimeout, "runtime-timeout", cfg.RuntimeTimeout, "give up a CRI call after this long")
	fs.String("cgroup-root", "", "deprecated, ignored: containers are found through the CRI (--runtime-endpoint)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	install := fs.String("install-library", "", "copy this libgpuslice.so to --library at start (and remove it at exit when no GPU pod is left)")
	fs.String("runtime-state-dir", "", "deprecated, ignored: containers' OCI specs come from the CRI (--runtime-endpoint)")
	fs.StringVar(&cfg.Sharing, "sharing", cfg.Sharing, "GPU sharing mode: timeslice or mps for every GPU, or <index|uuid>=<mode>,...")
	fs.StringVar(&cfg.MPSControl, "mps-control", cfg.MPSControl, "MPS control daemon (default nvidia-cuda-mps-control; on the simulated GPU its stand-in)")
	fs.StringVar(&cfg.MPSDir, "mps-dir", cfg.MPSDir, "directory of the MPS daemons' per-GPU pipe and log directories")
	fs.IntVar(&cfg.MPSServers, "mps-servers", cfg.MPSServers, "MPS servers per mps GPU (K)")
	fs.IntVar(&cfg.MPSUnitsPerClient, "mps-units-per-client", cfg.MPSUnitsPerClient, "units per MPS client slot (M); an mps GPU has M x 48 x K units")
	fs.StringVar(&cfg.CDIKind, "cdi-kind", cfg.CDIKind, "CDI kind of the GPU devices named in Allocate: gpuslice.io/gpu (write the spec into --cdi-spec-dir), nvidia.com/gpu (the NVIDIA toolkit's spec) or \"\" (none)")
	fs.StringVar(&cfg.CDISpecDir, "cdi-spec-dir", cfg.CDISpecDir, "where the gpuslice.io/gpu CDI spec is written")
	fs.StringVar(&cfg.MetricsAddress, "metrics-address", cfg.MetricsAddress, "serve /metrics, /healthz and /readyz on this address (\"\": off)")
	fs.IntVar(&cfg.MetricsMaxGroups, "metrics-max-groups", cfg.MetricsMaxGroups, "most groups per GPU with metric series of their own (the rest: group=\"_other\")")
	fs.BoolVar(&cfg.HealthChecks, "health-checks", cfg.HealthChecks, "withdraw GPUs that report a critical XID (NVML events) or fail NVML queries")
	fs.DurationVar(&cfg.HealthPeriod, "health-period", cfg.HealthPeriod, "query each GPU's health this often")
	skipXIDs := fs.String("health-skip-xids", "", "comma-separated XIDs that do not withdraw a GPU (beyond the application XIDs 13,31,43,45,68,109)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println(version.String("gpuslice-node"))
		return
	}
	mode, err := gpu.ParseMode(*driver)
	if err == nil {
		err = logflags.Apply(logCfg)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpuslice-node: %v\n", err)
		os.Exit(2)
	}
	cfg.Driver = mode
	if cfg.HealthSkipXIDs, err = health.ParseXIDs(*skipXIDs); err != nil {
		fmt.Fprintf(os.Stderr, "gpuslice-node: --health-skip-xids: %v\n", err)
		os.Exit(2)
	}
	cfg.ControlDevices = nil
	for _, d := range strings.Split(*control, ",") {
		if d = strings.TrimSpace(d); d != "" {
			cfg.ControlDevices = append(cfg.ControlDevices, d)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	klog.Background().Info("starting gpuslice-node", "version", version.Get(), "node", cfg.NodeName, "driver", cfg.Driver)
	if *install != "" {
		err = agent.RunInstalled(ctx, cfg, env, *install)
	} else {
		err = agent.Run(ctx, cfg, env)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "gpuslice-node")
		stop()
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
