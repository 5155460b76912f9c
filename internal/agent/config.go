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

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpucdi"
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

// DefaultConfig returns the defaults for this environment (each node
// setting's, NodeSettings).
func DefaultConfig(getenv func(string) string) Config {
	c := Config{ProcRoot: "/proc"}
	for _, s := range NodeSettings() {
		if s.setDefault != nil {
			s.setDefault(&c, getenv)
		}
	}
	return c
}

// Validate checks c: each node setting's range (NodeSettings), and those
// that depend on another. Each error names the setting by its
// configuration file field and flag (internal/nodeconfig).
func (c Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("nodeName (--node-name, $NODE_NAME) is required"))
	}
	for _, s := range NodeSettings() {
		if s.check != nil {
			errs = append(errs, s.check(&c))
		}
	}
	if c.ProcRoot != "" && !filepath.IsAbs(c.ProcRoot) {
		errs = append(errs, fmt.Errorf("proc root %q: want an absolute path", c.ProcRoot))
	}
	if c.CDIKind == gpucdi.Kind && !filepath.IsAbs(c.CDISpecDir) {
		errs = append(errs, fmt.Errorf("devicePlugin.cdiSpecDir (--cdi-spec-dir) %q: want an absolute path", c.CDISpecDir))
	}
	return errors.Join(append(errs, c.validateBusy()...)...)
}

// validateBusy checks the DRA settings: one path per node, and the busy
// taint's thresholds below one another (0 above: off).
func (c Config) validateBusy() []error {
	var errs []error
	if c.DRA && c.DevicePlugin {
		errs = append(errs, errors.New("dra.enabled (--dra) and devicePlugin.enabled (--device-plugin) are both true: "+
			"offer the node's GPUs through one path (--device-plugin=false with --dra); the stock scheduler and gpuslice-scheduler would book a GPU twice"))
	}
	if c.DRABusyAbove > 0 && (c.DRABusyBelow < 0 || c.DRABusyBelow >= c.DRABusyAbove) {
		errs = append(errs, fmt.Errorf("dra.busyBelow (--dra-busy-below) %d: want 0..%d (below dra.busyAbove, for hysteresis)",
			c.DRABusyBelow, c.DRABusyAbove-1))
	}
	return errs
}
