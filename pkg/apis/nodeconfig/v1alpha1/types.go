package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// Duration is a Go duration string ("1s", "500ms", "1m30s"), parsed when the
// file is read so that a bad one is reported with its field's name.
type Duration string

// Version identifiers of this file format.
const (
	Group      = "gpuslice.io"
	Version    = "v1alpha1"
	APIVersion = Group + "/" + Version
	Kind       = "NodeConfig"
)

// NodeConfig is gpuslice-node's configuration file. A field left out keeps
// its default; the flag named in each comment (or its environment variable,
// GPUSLICE_NODE_<FLAG>) overrides it.
type NodeConfig struct {
	metav1.TypeMeta `json:",inline"`

	// NodeName is this node's name (--node-name; $NODE_NAME).
	NodeName string `json:"nodeName"`
	// Kubeconfig ("": in-cluster or $KUBECONFIG) (--kubeconfig).
	Kubeconfig string `json:"kubeconfig"`
	// Driver is the GPU driver: auto, real or sim (--driver).
	Driver string `json:"driver"`
	// SimDir holds the simulated driver's libraries (--sim-dir).
	SimDir string `json:"simDir"`
	// Library is the host path of libgpuslice.so given to containers
	// (--library); InstallLibrary, when set, is copied there at start
	// (--install-library).
	Library        string `json:"library"`
	InstallLibrary string `json:"installLibrary"`
	// DevRoot holds the host's nvidia<N> device nodes (--dev-root);
	// ControlDevices are driver-wide nodes given to GPU containers
	// (--control-devices, comma-separated).
	DevRoot        string   `json:"devRoot"`
	ControlDevices []string `json:"controlDevices"`
	// Resync re-applies every container's devices this often (--resync).
	Resync Duration `json:"resync"`
	// PublishPeriod: the node's GPUNode row is published this often
	// (--publish-period).
	PublishPeriod Duration `json:"publishPeriod"`

	Daemon       Daemon       `json:"daemon"`
	DevicePlugin DevicePlugin `json:"devicePlugin"`
	Runtime      Runtime      `json:"runtime"`
	Sharing      Sharing      `json:"sharing"`
	Metrics      Metrics      `json:"metrics"`
	Health       Health       `json:"health"`
	// DRA is the DRA kubelet plugin's section.
	DRA DRA `json:"dra"`
	// Logging is the Kubernetes components' logging configuration
	// (-v, --vmodule, --logging-format, ...).
	Logging logsapi.LoggingConfiguration `json:"logging"`
}

// Daemon is the node's time-slice daemon.
type Daemon struct {
	// Enabled runs it as a supervised child process (--daemon).
	Enabled bool `json:"enabled"`
	// Binary is the gpuslice CLI that runs it ("": beside gpuslice-node)
	// (--daemon-binary).
	Binary string `json:"binary"`
	// RunDir is its run directory (--run-dir); Socket its socket (--socket).
	RunDir string `json:"runDir"`
	Socket string `json:"socket"`
}

// DevicePlugin is the kubelet device plugins and what Allocate answers.
type DevicePlugin struct {
	// Enabled serves the kubelet device plugins gpuslice.io/gpu and
	// gpuslice.io/gpu-units on this node (--device-plugin); off, the node's
	// GPUs are offered through DRA alone.
	Enabled bool `json:"enabled"`
	// PluginDir is the kubelet's device plugin directory (--plugin-dir).
	PluginDir string `json:"pluginDir"`
	// PodResources is the kubelet's pod-resources socket (--pod-resources).
	PodResources string `json:"podResources"`
	// SlotsPerGPU is the slots of gpuslice.io/gpu per GPU (--slots-per-gpu).
	SlotsPerGPU int `json:"slotsPerGPU"`
	// CDIKind is the CDI kind named in Allocate: gpuslice.io/gpu,
	// nvidia.com/gpu or "" (--cdi-kind); CDISpecDir is where the
	// gpuslice.io/gpu spec is written (--cdi-spec-dir).
	CDIKind    string `json:"cdiKind"`
	CDISpecDir string `json:"cdiSpecDir"`
}

// Runtime is the container runtime's CRI endpoint.
type Runtime struct {
	// Endpoint is its CRI socket (--runtime-endpoint).
	Endpoint string `json:"endpoint"`
	// Timeout gives up a CRI call after this long (--runtime-timeout).
	Timeout Duration `json:"timeout"`
}

// Sharing is how GPUs are shared.
type Sharing struct {
	// Mode is timeslice or mps for every GPU, or <index|uuid>=<mode>,...
	// (--sharing).
	Mode string `json:"mode"`
	MPS  MPS    `json:"mps"`
}

// MPS is the MPS sharing mode's settings.
type MPS struct {
	// Control is the MPS control daemon (--mps-control).
	Control string `json:"control"`
	// Dir holds the daemons' per-GPU pipe and log directories (--mps-dir).
	Dir string `json:"dir"`
	// Servers is the MPS servers per mps GPU, K (--mps-servers).
	Servers int `json:"servers"`
	// UnitsPerClient is the units per client slot, M (--mps-units-per-client).
	UnitsPerClient int `json:"unitsPerClient"`
}

// Metrics is the /metrics, /healthz and /readyz endpoint.
type Metrics struct {
	// Address to serve on ("": off) (--metrics-address).
	Address string `json:"address"`
	// MaxGroups is the most groups per GPU with series of their own
	// (--metrics-max-groups).
	MaxGroups int `json:"maxGroups"`
}

// Health is the GPU health checks.
type Health struct {
	// Enabled withdraws GPUs that report a critical XID or fail NVML
	// queries (--health-checks).
	Enabled bool `json:"enabled"`
	// Period is how often each GPU is queried (--health-period).
	Period Duration `json:"period"`
	// SkipXIDs do not withdraw a GPU (--health-skip-xids, comma-separated).
	SkipXIDs []uint64 `json:"skipXIDs"`
}

// DRA is the gpuslice.io DRA kubelet plugin's settings (docs/dra.md).
type DRA struct {
	// Enabled runs the DRA kubelet plugin (--dra).
	Enabled bool `json:"enabled"`
	// PluginDir holds its socket and checkpoint (--dra-plugin-dir).
	PluginDir string `json:"pluginDir"`
	// RegistrarDir is the kubelet's plugin registration directory (--dra-registrar-dir).
	RegistrarDir string `json:"registrarDir"`
	// CDIDir is where the per-claim CDI specs are written (--dra-cdi-dir).
	CDIDir string `json:"cdiDir"`
	// BusyAbove taints a GPU NoSchedule (gpuslice.io/busy) once its
	// measured utilization (percent) has stayed at or above it for BusyHold;
	// 0 turns the busy taint off (--dra-busy-above).
	BusyAbove int `json:"busyAbove"`
	// BusyBelow lifts the taint once utilization has stayed below it for
	// BusyHold (--dra-busy-below); below BusyAbove, for hysteresis.
	BusyBelow int `json:"busyBelow"`
	// BusyHold is how long utilization must stay across a threshold (--dra-busy-hold).
	BusyHold Duration `json:"busyHold"`
}
