// Package agent is gpuslice-node: on each node it runs the time-slice daemon, the
// kubelet device plugin, the resource-table publisher (the node's GPUNode
// row), and the hot-plug reconciler that keeps every running container's GPU
// devices equal to its assignment (adding and removing them in place when the
// assignment changes), reporting what it applied on the pod. Wiring only; the logic lives in internal/deviceplugin,
// internal/hotplug, internal/gpunoderow and internal/timeslice.
package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpucdi"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// Config is the agent's configuration.
type Config struct {
	NodeName   string
	Kubeconfig string // "": in-cluster or $KUBECONFIG
	Driver     gpu.Mode
	// SimDir holds the simulated driver (used when there is no real one).
	SimDir string
	// Library is the host path of libgpuslice.so given to containers.
	Library string
	// RunDir is the time-slice daemon's run directory; Socket its socket.
	RunDir, Socket string
	// RunDaemon runs the time-slice daemon as a supervised child process
	// (DaemonBinary node ...): killed or crashed, it is started again at once.
	RunDaemon bool
	// DaemonBinary is the gpuslice CLI that runs the daemon ("": gpuslice
	// beside this executable).
	DaemonBinary string
	// DevicePlugin serves the kubelet device plugins (gpuslice.io/gpu and
	// the units resource); off, the node's GPUs are offered through DRA alone.
	DevicePlugin bool
	// PluginDir is the kubelet's device plugin directory; PodResources the
	// kubelet's pod-resources socket.
	PluginDir, PodResources string
	// DevRoot holds the host's nvidia<minor> nodes; ControlDevices are
	// driver-wide nodes given to every GPU container (if they exist).
	DevRoot        string
	ControlDevices []string
	SlotsPerGPU    int
	// Resync re-applies every container's devices this often, undoing
	// rewrites by the runtime.
	Resync time.Duration
	// PublishPeriod: the node's GPUNode row is published this often (the
	// monitoring period).
	PublishPeriod time.Duration
	// ProcRoot is where /proc is mounted.
	ProcRoot string
	// RuntimeEndpoint is the container runtime's CRI socket
	// (unix:///run/containerd/containerd.sock, unix:///var/run/crio/crio.sock):
	// a running container's process and OCI spec (its device rules on
	// cgroup v2) come from ContainerStatus (verbose). Each call gives up
	// after RuntimeTimeout.
	RuntimeEndpoint string
	RuntimeTimeout  time.Duration
	// Sharing is each GPU's sharing mode: "timeslice" or "mps" for all, or
	// <index or UUID>=<mode>,... (internal/mps.ParseModes).
	Sharing string
	// MPSControl is the MPS control daemon ("": nvidia-cuda-mps-control,
	// or the simulator's stand-in in SimDir on the simulated GPU); MPSDir
	// holds each GPU's pipe and log directories; MPSServers (K) daemons run
	// per mps GPU, each client slot worth MPSUnitsPerClient (M) units.
	MPSControl, MPSDir            string
	MPSServers, MPSUnitsPerClient int
	// CDIKind names the CDI kind given to the runtime for the
	// container's GPUs: gpucdi.Kind (the spec this agent writes into
	// CDISpecDir), gpucdi.KindNVIDIA (the NVIDIA toolkit's spec) or ""
	// (no CDI names).
	CDIKind, CDISpecDir string
	// MetricsAddress serves /metrics, /healthz and /readyz ("": off).
	MetricsAddress string
	// MetricsMaxGroups is the most groups per GPU with series of their
	// own; the rest are summed under group="_other".
	MetricsMaxGroups int
	// HealthChecks withdraws GPUs that report a critical XID or fail
	// NVML queries (internal/health); HealthPeriod is how often each GPU
	// is queried; HealthSkipXIDs are XIDs not critical beyond the
	// application ones (13, 31, 43, 45, 68, 109).
	HealthChecks bool
	// DRA runs the gpuslice.io DRA kubelet plugin (internal/dra): its socket
	// and checkpoint in DRAPluginDir, registered in DRARegistrarDir, a CDI
	// spec per prepared claim in DRACDIDir.
	DRA                                      bool
	DRAPluginDir, DRARegistrarDir, DRACDIDir string
	// DRABusyAbove and DRABusyBelow (percent) taint a GPU whose measured
	// utilization stayed at or above DRABusyAbove for DRABusyHold, until
	// it stays below DRABusyBelow as long (internal/dra/taints); 0: off.
	DRABusyAbove, DRABusyBelow int
	DRABusyHold                time.Duration
	HealthPeriod               time.Duration
	HealthSkipXIDs             []uint64
}

// DefaultConfig returns the defaults for this environment.
func DefaultConfig(getenv func(string) string) Config {
	return Config{
		NodeName:          getenv("NODE_NAME"),
		Driver:            gpu.ModeAuto,
		RunDir:            paths.RunDir(getenv),
		Socket:            nodestatus.SocketPath(getenv),
		RunDaemon:         true,
		DevicePlugin:      true,
		PluginDir:         pluginapi.DevicePluginPath,
		PodResources:      "/var/lib/kubelet/pod-resources/kubelet.sock",
		DevRoot:           "/dev",
		ControlDevices:    []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"},
		SlotsPerGPU:       api.MaxContainersPerGPU,
		Resync:            time.Second,
		PublishPeriod:     10 * time.Second,
		ProcRoot:          "/proc",
		RuntimeEndpoint:   "unix:///run/containerd/containerd.sock",
		RuntimeTimeout:    5 * time.Second,
		Sharing:           string(api.SharingTimeslice),
		MPSDir:            filepath.Join(paths.RunDir(getenv), "mps"),
		MPSServers:        api.DefaultMPSServers,
		MPSUnitsPerClient: api.DefaultMPSUnitsPerClient,
		CDIKind:           gpucdi.Kind,
		CDISpecDir:        "/var/run/cdi",
		MetricsAddress:    ":9446",
		MetricsMaxGroups:  64,
		HealthChecks:      true,
		DRAPluginDir:      "/var/lib/kubelet/plugins/gpuslice.io",
		DRARegistrarDir:   "/var/lib/kubelet/plugins_registry",
		DRACDIDir:         "/var/run/cdi",
		DRABusyHold:       time.Minute,
		HealthPeriod:      5 * time.Second,
	}
}

// Validate checks c. Each error names the setting by its configuration
// file field and flag (internal/nodeconfig).
func (c Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("nodeName (--node-name, $NODE_NAME) is required"))
	}
	for _, p := range []struct{ field, path string }{
		{"daemon.runDir (--run-dir)", c.RunDir}, {"daemon.socket (--socket)", c.Socket},
		{"devicePlugin.pluginDir (--plugin-dir)", c.PluginDir}, {"devicePlugin.podResources (--pod-resources)", c.PodResources},
		{"devRoot (--dev-root)", c.DevRoot}, {"sharing.mps.dir (--mps-dir)", c.MPSDir},
		{"dra.pluginDir (--dra-plugin-dir)", c.DRAPluginDir}, {"dra.registrarDir (--dra-registrar-dir)", c.DRARegistrarDir},
		{"dra.cdiDir (--dra-cdi-dir)", c.DRACDIDir},
	} {
		if !filepath.IsAbs(p.path) {
			errs = append(errs, fmt.Errorf("%s %q: want an absolute path", p.field, p.path))
		}
	}
	if c.ProcRoot != "" && !filepath.IsAbs(c.ProcRoot) {
		errs = append(errs, fmt.Errorf("proc root %q: want an absolute path", c.ProcRoot))
	}
	if c.SlotsPerGPU < api.MaxContainersPerGPU || c.SlotsPerGPU > deviceplugin.MaxSlotsPerGPU {
		errs = append(errs, fmt.Errorf("devicePlugin.slotsPerGPU (--slots-per-gpu) %d: want %d..%d (the scheduler places up to %d containers on a GPU; fewer slots would fail their admission)",
			c.SlotsPerGPU, api.MaxContainersPerGPU, deviceplugin.MaxSlotsPerGPU, api.MaxContainersPerGPU))
	}
	if c.PublishPeriod < time.Second {
		errs = append(errs, fmt.Errorf("publishPeriod (--publish-period) %s: want at least 1s", c.PublishPeriod))
	}
	if c.MPSServers < 1 || c.MPSServers > 8 {
		errs = append(errs, fmt.Errorf("sharing.mps.servers (--mps-servers) %d: want 1..8", c.MPSServers))
	}
	if c.MPSUnitsPerClient < 1 || c.MPSUnitsPerClient > 100 {
		errs = append(errs, fmt.Errorf("sharing.mps.unitsPerClient (--mps-units-per-client) %d: want 1..100", c.MPSUnitsPerClient))
	}
	switch c.CDIKind {
	case "", gpucdi.KindNVIDIA:
	case gpucdi.Kind:
		if !filepath.IsAbs(c.CDISpecDir) {
			errs = append(errs, fmt.Errorf("devicePlugin.cdiSpecDir (--cdi-spec-dir) %q: want an absolute path", c.CDISpecDir))
		}
	default:
		errs = append(errs, fmt.Errorf("devicePlugin.cdiKind (--cdi-kind) %q: want %s, %s or \"\"", c.CDIKind, gpucdi.Kind, gpucdi.KindNVIDIA))
	}
	if c.MetricsMaxGroups < 1 {
		errs = append(errs, fmt.Errorf("metrics.maxGroups (--metrics-max-groups) %d: want at least 1", c.MetricsMaxGroups))
	}
	if c.HealthPeriod < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("health.period (--health-period) %s: want at least 100ms", c.HealthPeriod))
	}
	if c.Resync < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("resync (--resync) %s: want at least 10ms", c.Resync))
	}
	if c.RuntimeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("runtime.timeout (--runtime-timeout) %s: want more than 0", c.RuntimeTimeout))
	}
	return errors.Join(append(errs, c.validateBusy()...)...)
}

// validateBusy checks the DRA settings: one path per node, and the busy
// taint's thresholds (0 above: off).
func (c Config) validateBusy() []error {
	var errs []error
	if c.DRA && c.DevicePlugin {
		errs = append(errs, errors.New("dra.enabled (--dra) and devicePlugin.enabled (--device-plugin) are both true: "+
			"offer the node's GPUs through one path (--device-plugin=false with --dra); the stock scheduler and gpuslice-scheduler would book a GPU twice"))
	}
	if c.DRABusyAbove < 0 || c.DRABusyAbove > 100 {
		errs = append(errs, fmt.Errorf("dra.busyAbove (--dra-busy-above) %d: want 0 (off) or 1..100", c.DRABusyAbove))
	}
	if c.DRABusyAbove > 0 && (c.DRABusyBelow < 0 || c.DRABusyBelow >= c.DRABusyAbove) {
		errs = append(errs, fmt.Errorf("dra.busyBelow (--dra-busy-below) %d: want 0..%d (below dra.busyAbove, for hysteresis)",
			c.DRABusyBelow, c.DRABusyAbove-1))
	}
	if c.DRABusyHold < 0 {
		errs = append(errs, fmt.Errorf("dra.busyHold (--dra-busy-hold) %s: want 0 or more", c.DRABusyHold))
	}
	return errs
}
