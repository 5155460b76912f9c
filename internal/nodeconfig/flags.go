package nodeconfig

import (
	"errors"
	"flag"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/health"
	"github.com/gpuslice/gpuslice/internal/logflags"
	v1 "github.com/gpuslice/gpuslice/pkg/apis/nodeconfig/v1alpha1"
)

// Flag names of the command line itself (not settings).
const (
	FlagConfig  = "config"
	FlagVersion = "version"
	// EnvConfig names the configuration file when --config is not given.
	EnvConfig = "GPUSLICE_NODE_CONFIG"
	// EnvPrefix + a setting flag's name in upper case, "-" as "_", is the
	// flag's environment variable (--slots-per-gpu: GPUSLICE_NODE_SLOTS_PER_GPU).
	EnvPrefix = "GPUSLICE_NODE_"
	// EnvNodeName also sets --node-name (the Kubernetes downward API's usual name).
	EnvNodeName = "NODE_NAME"
)

// EnvName is the environment variable of the setting flag name.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// setting is one setting flag: its name, the file field it sets and help.
type setting struct {
	flag, field, usage string
}

// flagSet is the command line bound to one file's worth of settings.
type flagSet struct {
	fs       *flag.FlagSet
	settings []setting // in registration order
	config   string
	version  bool
}

// newFlagSet registers every flag on a fresh flag set, each bound to its
// field of c (the flag's default is c's value).
func newFlagSet(c *v1.NodeConfig) *flagSet {
	f := &flagSet{fs: flag.NewFlagSet("gpuslice-node", flag.ContinueOnError)}
	f.fs.StringVar(&f.config, FlagConfig, "", "configuration file (apiVersion "+v1.APIVersion+", kind "+v1.Kind+"; default $"+EnvConfig+"); flags and the environment override it")
	f.fs.BoolVar(&f.version, FlagVersion, false, "print the version and exit")
	logflags.BindGoFlags(&c.Logging, f.fs)
	f.str("node-name", "nodeName", &c.NodeName, "this node's name (default $NODE_NAME)")
	f.str("kubeconfig", "kubeconfig", &c.Kubeconfig, "kubeconfig (default: in-cluster or $KUBECONFIG)")
	f.str("driver", "driver", &c.Driver, "GPU driver: auto, real or sim")
	f.str("sim-dir", "simDir", &c.SimDir, "directory of the simulated driver libraries")
	f.str("library", "library", &c.Library, "host path of libgpuslice.so to inject")
	f.str("install-library", "installLibrary", &c.InstallLibrary, "copy this libgpuslice.so to --library at start (and remove it at exit when no GPU pod is left)")
	f.str("dev-root", "devRoot", &c.DevRoot, "host directory of the nvidia<N> device nodes")
	f.add("control-devices", "controlDevices", (*listValue)(&c.ControlDevices), "driver-wide device nodes given to GPU containers (comma-separated)")
	f.dur("resync", "resync", &c.Resync, "re-apply every container's devices this often")
	f.dur("publish-period", "publishPeriod", &c.PublishPeriod, "publish the node's GPUNode row this often")
	f.boolean("daemon", "daemon.enabled", &c.Daemon.Enabled, "run the node daemon (a child process, started again at once if it dies)")
	f.str("daemon-binary", "daemon.binary", &c.Daemon.Binary, "the gpuslice CLI that runs the node daemon (default: gpuslice beside this executable)")
	f.str("run-dir", "daemon.runDir", &c.Daemon.RunDir, "node daemon run directory")
	f.str("socket", "daemon.socket", &c.Daemon.Socket, "node daemon socket")
	f.boolean("device-plugin", "devicePlugin.enabled", &c.DevicePlugin.Enabled, "serve the kubelet device plugins gpuslice.io/gpu and gpuslice.io/gpu-units (false: the GPUs are offered through DRA alone)")
	f.str("plugin-dir", "devicePlugin.pluginDir", &c.DevicePlugin.PluginDir, "kubelet device plugin directory")
	f.str("pod-resources", "devicePlugin.podResources", &c.DevicePlugin.PodResources, "kubelet pod-resources socket")
	f.integer("slots-per-gpu", "devicePlugin.slotsPerGPU", &c.DevicePlugin.SlotsPerGPU, "slots of gpuslice.io/gpu per GPU (at least the scheduler's 100 containers per GPU)")
	f.str("cdi-kind", "devicePlugin.cdiKind", &c.DevicePlugin.CDIKind, "CDI kind of the GPU devices named in Allocate: gpuslice.io/gpu (write the spec into --cdi-spec-dir), nvidia.com/gpu (the NVIDIA toolkit's spec) or \"\" (none)")
	f.str("cdi-spec-dir", "devicePlugin.cdiSpecDir", &c.DevicePlugin.CDISpecDir, "where the gpuslice.io/gpu CDI spec is written")
	f.str("runtime-endpoint", "runtime.endpoint", &c.Runtime.Endpoint, "the container runtime's CRI socket (containerd, CRI-O): running containers' processes and OCI specs")
	f.dur("runtime-timeout", "runtime.timeout", &c.Runtime.Timeout, "give up a CRI call after this long")
	f.addSharing(c)
	return f
}

// addSharing registers the flags of GPU sharing (time slices, MPS),
// metrics and health checks.
func (f *flagSet) addSharing(c *v1.NodeConfig) {
	f.str("sharing", "sharing.mode", &c.Sharing.Mode, "GPU sharing mode: timeslice or mps for every GPU, or <index|uuid>=<mode>,...")
	f.str("mps-control", "sharing.mps.control", &c.Sharing.MPS.Control, "MPS control daemon (default nvidia-cuda-mps-control; on the simulated GPU its stand-in)")
	f.str("mps-dir", "sharing.mps.dir", &c.Sharing.MPS.Dir, "directory of the MPS daemons' per-GPU pipe and log directories")
	f.integer("mps-servers", "sharing.mps.servers", &c.Sharing.MPS.Servers, "MPS servers per mps GPU (K)")
	f.integer("mps-units-per-client", "sharing.mps.unitsPerClient", &c.Sharing.MPS.UnitsPerClient, "units per MPS client slot (M); an mps GPU has M x 48 x K units")
	f.str("metrics-address", "metrics.address", &c.Metrics.Address, "serve /metrics, /healthz and /readyz on this address (\"\": off)")
	f.integer("metrics-max-groups", "metrics.maxGroups", &c.Metrics.MaxGroups, "most groups per GPU with metric series of their own (the rest: group=\"_other\")")
	f.boolean("health-checks", "health.enabled", &c.Health.Enabled, "withdraw GPUs that report a critical XID (NVML events) or fail NVML queries")
	f.dur("health-period", "health.period", &c.Health.Period, "query each GPU's health this often")
	f.boolean("dra", "dra.enabled", &c.DRA.Enabled, "run the gpuslice.io DRA kubelet plugin (ResourceSlices, Prepare of ResourceClaims)")
	f.str("dra-plugin-dir", "dra.pluginDir", &c.DRA.PluginDir, "the DRA plugin's directory (its socket and checkpoint)")
	f.str("dra-registrar-dir", "dra.registrarDir", &c.DRA.RegistrarDir, "the kubelet's plugin registration directory")
	f.str("dra-cdi-dir", "dra.cdiDir", &c.DRA.CDIDir, "where the DRA plugin writes a CDI spec per prepared claim")
	f.integer("dra-busy-above", "dra.busyAbove", &c.DRA.BusyAbove, "taint a GPU gpuslice.io/busy (NoSchedule) once its utilization stayed at or above this percent for --dra-busy-hold (0: off)")
	f.integer("dra-busy-below", "dra.busyBelow", &c.DRA.BusyBelow, "lift the busy taint once utilization stayed below this percent for --dra-busy-hold")
	f.dur("dra-busy-hold", "dra.busyHold", &c.DRA.BusyHold, "how long utilization must stay across a busy threshold")
	f.add("health-skip-xids", "health.skipXIDs", (*xidsValue)(&c.Health.SkipXIDs), "comma-separated XIDs that do not withdraw a GPU (beyond the application XIDs 13,31,43,45,68,109)")
}

func (f *flagSet) add(name, field string, v flag.Value, usage string) {
	f.fs.Var(v, name, usage+" (file: "+field+"; env: "+EnvName(name)+")")
	f.settings = append(f.settings, setting{flag: name, field: field, usage: usage})
}

func (f *flagSet) str(name, field string, p *string, usage string) {
	f.add(name, field, (*stringValue)(p), usage)
}

// dur binds a duration, a string parsed on conversion (ToAgent).
func (f *flagSet) dur(name, field string, p *v1.Duration, usage string) {
	f.add(name, field, (*stringValue)(p), usage)
}

func (f *flagSet) integer(name, field string, p *int, usage string) {
	f.add(name, field, (*intValue)(p), usage)
}

func (f *flagSet) boolean(name, field string, p *bool, usage string) {
	f.add(name, field, (*boolValue)(p), usage)
}

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

type intValue int

func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return numError(err)
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return strconv.Itoa(int(*v)) }

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return numError(err)
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

// listValue is a comma-separated list; empty items are dropped.
type listValue []string

func (v *listValue) Set(s string) error {
	*v = nil
	for _, d := range strings.Split(s, ",") {
		if d = strings.TrimSpace(d); d != "" {
			*v = append(*v, d)
		}
	}
	return nil
}
func (v *listValue) String() string { return strings.Join(*v, ",") }

// xidsValue is a comma-separated list of XIDs.
type xidsValue []uint64

func (v *xidsValue) Set(s string) error {
	x, err := health.ParseXIDs(s)
	if err != nil {
		return err
	}
	*v = x
	return nil
}

func (v *xidsValue) String() string {
	s := make([]string, len(*v))
	for i, x := range *v {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, ",")
}

// numError drops strconv's "strconv.ParseInt: parsing" prefix.
func numError(err error) error {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return ne.Err
	}
	return err
}
