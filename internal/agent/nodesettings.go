package agent

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpucdi"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/pkg/api"
	v1 "github.com/gpuslice/gpuslice/pkg/apis/nodeconfig/v1alpha1"
)

// Setting is one node setting, defined once in NodeSettings: its flag
// (--Flag; internal/nodeconfig derives its environment variable,
// GPUSLICE_NODE_<FLAG>), its field in the configuration file (Field, a JSON
// path in v1alpha1.NodeConfig), its help, its default and range, and its
// place in Config (ConfigField, a field of NodeValues). `go generate
// ./internal/nodeconfig` writes both fields from the rows: NodeValues's
// (ConfigType) and v1alpha1.NodeConfig's (FileType).
type Setting struct {
	Flag, Field, Usage string
	ConfigField        string       // "": a setting of the file alone
	ConfigType         reflect.Type // the Config field's type
	FileType           reflect.Type // the file field's type
	// to and from convert the file form's field (found by Field) to and from
	// Config's (nil for a setting of the file alone: installLibrary).
	to         func(n *v1.NodeConfig, c *Config) error
	from       func(c *Config, n *v1.NodeConfig)
	setDefault func(c *Config, getenv func(string) string)
	check      func(c *Config) error
}

// Name is the setting as errors name it: "resync (--resync)".
func (s Setting) Name() string { return s.Field + " (--" + s.Flag + ")" }

// File is a pointer to the setting's field in n (a *string, *int, *bool,
// *[]string, *[]uint64 or *v1alpha1.Duration), found by its JSON path.
func (s Setting) File(n *v1.NodeConfig) any { return fileField(n, s.Field).Addr().Interface() }

// ToConfig reads the setting from the file form n into c; a value that does
// not parse is an error naming the setting.
func (s Setting) ToConfig(n *v1.NodeConfig, c *Config) error {
	if s.to == nil {
		return nil
	}
	if err := s.to(n, c); err != nil {
		return fmt.Errorf("%s: %w", s.Name(), err)
	}
	return nil
}

// FromConfig writes c's value of the setting into the file form n.
func (s Setting) FromConfig(c *Config, n *v1.NodeConfig) {
	if s.from != nil {
		s.from(c, n)
	}
}

// fileField is the field of n at the JSON path field.
func fileField(n *v1.NodeConfig, field string) reflect.Value {
	v := reflect.ValueOf(n).Elem()
outer:
	for _, name := range strings.Split(field, ".") {
		for i := 0; i < v.NumField(); i++ {
			if strings.Split(v.Type().Field(i).Tag.Get("json"), ",")[0] == name {
				v = v.Field(i)
				continue outer
			}
		}
		panic(fmt.Sprintf("agent: node setting field %q: no %q in NodeConfig", field, name)) // NodeSettings is static; its test reads every row
	}
	return v
}

// conv converts a file form's value F to Config's A and back.
type conv[F, A any] struct {
	to   func(F) (A, error)
	from func(A) F
}

func same[T any]() conv[T, T] {
	return conv[T, T]{to: func(v T) (T, error) { return v, nil }, from: func(v T) T { return v }}
}

func list[T any]() conv[[]T, []T] {
	return conv[[]T, []T]{to: func(v []T) ([]T, error) { return slices.Clone(v), nil }, from: slices.Clone[[]T]}
}

func duration() conv[v1.Duration, time.Duration] {
	return conv[v1.Duration, time.Duration]{
		to:   func(d v1.Duration) (time.Duration, error) { return time.ParseDuration(string(d)) },
		from: func(d time.Duration) v1.Duration { return v1.Duration(d.String()) },
	}
}

func driverMode() conv[string, gpu.Mode] {
	return conv[string, gpu.Mode]{to: gpu.ParseMode, from: func(m gpu.Mode) string { return string(m) }}
}

func xids() conv[[]uint64, []uint64] {
	return conv[[]uint64, []uint64]{
		to: func(x []uint64) ([]uint64, error) {
			for _, id := range x {
				if id > 1<<32-1 {
					return nil, fmt.Errorf("XID %d: want at most %d", id, uint64(1<<32-1))
				}
			}
			return slices.Clone(x), nil
		},
		from: slices.Clone[[]uint64],
	}
}

// setting is one row: cfgField is its place in Config (a field of
// NodeValues of type A; its file field is of type F), def its default (for the
// node's environment), check its range (nil: any value).
func setting[F, A any](flag, field, usage, cfgField string, cv conv[F, A], def func(getenv func(string) string) A,
	check func(A) error) Setting {
	s := Setting{Flag: flag, Field: field, Usage: usage, ConfigField: cfgField,
		ConfigType: reflect.TypeFor[A](), FileType: reflect.TypeFor[F]()}
	cfg := func(c *Config) *A { return configField(c, cfgField).Addr().Interface().(*A) }
	file := func(n *v1.NodeConfig) *F { return fileField(n, field).Addr().Interface().(*F) }
	s.to = func(n *v1.NodeConfig, c *Config) error {
		v, err := cv.to(*file(n))
		*cfg(c) = v
		return err
	}
	s.from = func(c *Config, n *v1.NodeConfig) { *file(n) = cv.from(*cfg(c)) }
	s.setDefault = func(c *Config, getenv func(string) string) { *cfg(c) = def(getenv) }
	if check != nil {
		s.check = func(c *Config) error {
			v := *cfg(c)
			if err := check(v); err != nil {
				if str, ok := any(v).(string); ok {
					return fmt.Errorf("%s %q: %w", s.Name(), str, err)
				}
				return fmt.Errorf("%s %v: %w", s.Name(), v, err)
			}
			return nil
		}
	}
	return s
}

// configField is c's field name (of NodeValues, generated from the rows).
func configField(c *Config, name string) reflect.Value {
	v := reflect.ValueOf(c).Elem().FieldByName(name)
	if !v.IsValid() {
		panic(fmt.Sprintf("agent: node setting %q: no such field in Config: run go generate ./internal/nodeconfig", name)) // NodeSettings is static; its test reads every row
	}
	return v
}

// fileOnly is a row of the file alone (no flag's value in Config).
func fileOnly[F any](flag, field, usage string) Setting {
	return Setting{Flag: flag, Field: field, Usage: usage, FileType: reflect.TypeFor[F]()}
}

// is is a default that does not depend on the environment.
func is[T any](v T) func(func(string) string) T { return func(func(string) string) T { return v } }

func absolute(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("want an absolute path")
	}
	return nil
}

func within(lo, hi int, why string) func(int) error {
	return func(n int) error {
		if n < lo || n > hi {
			return fmt.Errorf("want %d..%d%s", lo, hi, why)
		}
		return nil
	}
}

func atLeast(min time.Duration) func(time.Duration) error {
	return func(d time.Duration) error {
		if d < min {
			return fmt.Errorf("want at least %s", min)
		}
		return nil
	}
}

func positive(n int) error {
	if n < 1 {
		return fmt.Errorf("want at least 1")
	}
	return nil
}

// NodeSettings is every node setting: its flag, environment variable, file
// field, default, range and place in Config. Adding one: a row here, then `go
// generate ./internal/nodeconfig` writes its field in Config (NodeValues) and
// in the versioned file (pkg/apis/nodeconfig/v1alpha1) and its line of the
// docs' table.
func NodeSettings() []Setting {
	return append(nodeSettings(), sharingSettings()...)
}

func nodeSettings() []Setting {
	return []Setting{
		setting("node-name", "nodeName", "this node's name (default $NODE_NAME)", "NodeName",
			same[string](), func(getenv func(string) string) string { return getenv("NODE_NAME") }, nil),
		setting("kubeconfig", "kubeconfig", "kubeconfig (default: in-cluster or $KUBECONFIG)", "Kubeconfig",
			same[string](), is(""), nil),
		setting("driver", "driver", "GPU driver: auto, real or sim", "Driver", driverMode(), is(gpu.ModeAuto), nil),
		setting("sim-dir", "simDir", "directory of the simulated driver libraries", "SimDir",
			same[string](), is(""), nil),
		setting("library", "library", "host path of libgpuslice.so to inject", "Library",
			same[string](), is(""), nil),
		fileOnly[string]("install-library", "installLibrary", "copy this libgpuslice.so to --library at start (and remove it at exit when no GPU pod is left)"),
		setting("dev-root", "devRoot", "host directory of the nvidia<N> device nodes", "DevRoot",
			same[string](), is("/dev"), absolute),
		setting("control-devices", "controlDevices", "driver-wide device nodes given to GPU containers (comma-separated)",
			"ControlDevices", list[string](),
			func(func(string) string) []string {
				return []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
			}, nil),
		setting("resync", "resync", "re-apply every container's devices this often", "Resync",
			duration(), is(time.Second), atLeast(10*time.Millisecond)),
		setting("publish-period", "publishPeriod", "publish the node's GPUNode row this often",
			"PublishPeriod", duration(), is(10*time.Second), atLeast(time.Second)),
		setting("daemon", "daemon.enabled", "run the node daemon (a child process, started again at once if it dies)",
			"RunDaemon", same[bool](), is(true), nil),
		setting("daemon-binary", "daemon.binary", "the gpuslice CLI that runs the node daemon (default: gpuslice beside this executable)",
			"DaemonBinary", same[string](), is(""), nil),
		setting("run-dir", "daemon.runDir", "node daemon run directory", "RunDir",
			same[string](), paths.RunDir, absolute),
		setting("socket", "daemon.socket", "node daemon socket", "Socket",
			same[string](), nodestatus.SocketPath, absolute),
		setting("device-plugin", "devicePlugin.enabled", "serve the kubelet device plugins gpuslice.io/gpu and gpuslice.io/gpu-units (false: the GPUs are offered through DRA alone)",
			"DevicePlugin", same[bool](), is(true), nil),
		setting("plugin-dir", "devicePlugin.pluginDir", "kubelet device plugin directory", "PluginDir",
			same[string](), is(pluginapi.DevicePluginPath), absolute),
		setting("pod-resources", "devicePlugin.podResources", "kubelet pod-resources socket", "PodResources",
			same[string](), is("/var/lib/kubelet/pod-resources/kubelet.sock"), absolute),
		setting("slots-per-gpu", "devicePlugin.slotsPerGPU", "slots of gpuslice.io/gpu per GPU (at least the scheduler's 100 containers per GPU)",
			"SlotsPerGPU", same[int](), is(api.MaxContainersPerGPU),
			within(api.MaxContainersPerGPU, deviceplugin.MaxSlotsPerGPU, fmt.Sprintf(" (the scheduler places up to %d containers on a GPU; fewer slots would fail their admission)", api.MaxContainersPerGPU))),
		setting("cdi-kind", "devicePlugin.cdiKind", "CDI kind of the GPU devices named in Allocate: gpuslice.io/gpu (write the spec into --cdi-spec-dir), nvidia.com/gpu (the NVIDIA toolkit's spec) or \"\" (none)",
			"CDIKind", same[string](), is(gpucdi.Kind), cdiKind),
		setting("cdi-spec-dir", "devicePlugin.cdiSpecDir", "where the gpuslice.io/gpu CDI spec is written", "CDISpecDir",
			same[string](), is("/var/run/cdi"), nil),
		setting("runtime-endpoint", "runtime.endpoint", "the container runtime's CRI socket (containerd, CRI-O): running containers' processes and OCI specs",
			"RuntimeEndpoint", same[string](), is("unix:///run/containerd/containerd.sock"), nil),
		setting("runtime-timeout", "runtime.timeout", "give up a CRI call after this long", "RuntimeTimeout",
			duration(), is(5*time.Second), func(d time.Duration) error {
				if d <= 0 {
					return fmt.Errorf("want more than 0")
				}
				return nil
			}),
	}
}

// sharingSettings are the settings of GPU sharing (time slices, MPS),
// metrics, health checks and DRA.
func sharingSettings() []Setting {
	return []Setting{
		setting("sharing", "sharing.mode", "GPU sharing mode: timeslice or mps for every GPU, or <index|uuid>=<mode>,...",
			"Sharing", same[string](), is(string(api.SharingTimeslice)), nil),
		setting("mps-control", "sharing.mps.control", "MPS control daemon (default nvidia-cuda-mps-control; on the simulated GPU its stand-in)",
			"MPSControl", same[string](), is(""), nil),
		setting("mps-dir", "sharing.mps.dir", "directory of the MPS daemons' per-GPU pipe and log directories", "MPSDir",
			same[string](), func(getenv func(string) string) string { return filepath.Join(paths.RunDir(getenv), "mps") }, absolute),
		setting("mps-servers", "sharing.mps.servers", "MPS servers per mps GPU (K)", "MPSServers",
			same[int](), is(api.DefaultMPSServers), within(1, 8, "")),
		setting("mps-units-per-client", "sharing.mps.unitsPerClient", "units per MPS client slot (M); an mps GPU has M x 48 x K units",
			"MPSUnitsPerClient", same[int](), is(api.DefaultMPSUnitsPerClient), within(1, 100, "")),
		setting("metrics-address", "metrics.address", "serve /metrics, /healthz and /readyz on this address (\"\": off)",
			"MetricsAddress", same[string](), is(":9446"), nil),
		setting("metrics-max-groups", "metrics.maxGroups", "most groups per GPU with metric series of their own (the rest: group=\"_other\")",
			"MetricsMaxGroups", same[int](), is(64), positive),
		setting("health-checks", "health.enabled", "withdraw GPUs that report a critical XID (NVML events) or fail NVML queries",
			"HealthChecks", same[bool](), is(true), nil),
		setting("health-period", "health.period", "query each GPU's health this often", "HealthPeriod",
			duration(), is(5*time.Second), atLeast(100*time.Millisecond)),
		setting("dra", "dra.enabled", "run the gpuslice.io DRA kubelet plugin (ResourceSlices, Prepare of ResourceClaims)",
			"DRA", same[bool](), is(false), nil),
		setting("dra-plugin-dir", "dra.pluginDir", "the DRA plugin's directory (its socket and checkpoint)", "DRAPluginDir",
			same[string](), is("/var/lib/kubelet/plugins/gpuslice.io"), absolute),
		setting("dra-registrar-dir", "dra.registrarDir", "the kubelet's plugin registration directory", "DRARegistrarDir",
			same[string](), is("/var/lib/kubelet/plugins_registry"), absolute),
		setting("dra-cdi-dir", "dra.cdiDir", "where the DRA plugin writes a CDI spec per prepared claim", "DRACDIDir",
			same[string](), is("/var/run/cdi"), absolute),
		setting("dra-busy-above", "dra.busyAbove", "taint a GPU gpuslice.io/busy (NoSchedule) once its utilization stayed at or above this percent for --dra-busy-hold (0: off)",
			"DRABusyAbove", same[int](), is(0), func(n int) error {
				if n < 0 || n > 100 {
					return fmt.Errorf("want 0 (off) or 1..100")
				}
				return nil
			}),
		setting("dra-busy-below", "dra.busyBelow", "lift the busy taint once utilization stayed below this percent for --dra-busy-hold",
			"DRABusyBelow", same[int](), is(0), nil),
		setting("dra-busy-hold", "dra.busyHold", "how long utilization must stay across a busy threshold", "DRABusyHold",
			duration(), is(time.Minute), func(d time.Duration) error {
				if d < 0 {
					return fmt.Errorf("want 0 or more")
				}
				return nil
			}),
		setting("health-skip-xids", "health.skipXIDs", "comma-separated XIDs that do not withdraw a GPU (beyond the application XIDs 13,31,43,45,68,109)",
			"HealthSkipXIDs", xids(), is[[]uint64](nil), nil),
	}
}

func cdiKind(k string) error {
	switch k {
	case "", gpucdi.KindNVIDIA, gpucdi.Kind:
		return nil
	}
	return fmt.Errorf("want %s, %s or \"\"", gpucdi.Kind, gpucdi.KindNVIDIA)
}
