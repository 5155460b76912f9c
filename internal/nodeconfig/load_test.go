package nodeconfig

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/agent"
	v1 "github.com/gpuslice/gpuslice/pkg/apis/nodeconfig/v1alpha1"
)

const header = "apiVersion: gpuslice.io/v1alpha1\nkind: NodeConfig\n"

// load runs Load with env (a map) and a configuration file of content
// (none when "") named by --config.
func load(t *testing.T, file string, env map[string]string, args ...string) (Options, error) {
	t.Helper()
	if file != "" {
		p := filepath.Join(t.TempDir(), "node.yaml")
		if err := os.WriteFile(p, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", p}, args...)
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	return Load(args, lookup, io.Discard)
}

func TestPrecedence(t *testing.T) {
	file := header + "nodeName: file-node\nresync: 2s\ndevicePlugin: {slotsPerGPU: 200}\ndaemon: {enabled: false}\n" +
		"controlDevices: [/dev/a]\nhealth: {skipXIDs: [48]}\nlogging: {verbosity: 3}\n"
	cases := []struct {
		name string
		file string
		env  map[string]string
		args []string
		want func(o Options) bool
	}{
		{"defaults", "", map[string]string{"NODE_NAME": "n"}, nil, func(o Options) bool {
			return o.Agent.NodeName == "n" && o.Agent.Resync == time.Second && o.Agent.SlotsPerGPU == 100 && o.Agent.RunDaemon &&
				len(o.Agent.ControlDevices) == 3 && o.Logging.Verbosity == 0 && o.ConfigFile == ""
		}},
		{"file over defaults", file, nil, nil, func(o Options) bool {
			return o.Agent.NodeName == "file-node" && o.Agent.Resync == 2*time.Second && o.Agent.SlotsPerGPU == 200 && !o.Agent.RunDaemon &&
				reflect.DeepEqual(o.Agent.ControlDevices, []string{"/dev/a"}) && reflect.DeepEqual(o.Agent.HealthSkipXIDs, []uint64{48}) &&
				o.Logging.Verbosity == 3 && o.Agent.PublishPeriod == 10*time.Second // left out: default
		}},
		{"env over file", file, map[string]string{"NODE_NAME": "env-node", "GPUSLICE_NODE_RESYNC": "3s", "GPUSLICE_NODE_SLOTS_PER_GPU": "300",
			"GPUSLICE_NODE_DAEMON": "true", "GPUSLICE_NODE_CONTROL_DEVICES": "/dev/b,/dev/c", "GPUSLICE_NODE_HEALTH_SKIP_XIDS": ""}, nil, func(o Options) bool {
			return o.Agent.NodeName == "env-node" && o.Agent.Resync == 3*time.Second && o.Agent.SlotsPerGPU == 300 && o.Agent.RunDaemon &&
				reflect.DeepEqual(o.Agent.ControlDevices, []string{"/dev/b", "/dev/c"}) && len(o.Agent.HealthSkipXIDs) == 0
		}},
		{"GPUSLICE_NODE_NODE_NAME over NODE_NAME", "", map[string]string{"NODE_NAME": "a", "GPUSLICE_NODE_NODE_NAME": "b"}, nil,
			func(o Options) bool { return o.Agent.NodeName == "b" }},
		{"flags over env over file", file, map[string]string{"NODE_NAME": "env-node", "GPUSLICE_NODE_RESYNC": "3s", "GPUSLICE_NODE_SLOTS_PER_GPU": "300"},
			[]string{"--node-name=flag-node", "--resync", "4s", "--daemon=false", "-v=5", "--control-devices="}, func(o Options) bool {
				return o.Agent.NodeName == "flag-node" && o.Agent.Resync == 4*time.Second && o.Agent.SlotsPerGPU == 300 && !o.Agent.RunDaemon &&
					o.Logging.Verbosity == 5 && len(o.Agent.ControlDevices) == 0
			}},
		{"file named by the environment", file, map[string]string{}, nil, func(o Options) bool { return o.Agent.NodeName == "file-node" }},
		{"a flag mends a bad file value", header + "nodeName: x\nresync: 5x\n", nil, []string{"--resync=20ms"},
			func(o Options) bool { return o.Agent.Resync == 20*time.Millisecond }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var o Options
			var err error
			if c.name == "file named by the environment" {
				p := filepath.Join(t.TempDir(), "f.yaml")
				if err := os.WriteFile(p, []byte(c.file), 0o600); err != nil {
					t.Fatal(err)
				}
				o, err = load(t, "", map[string]string{EnvConfig: p}, c.args...)
			} else {
				o, err = load(t, c.file, c.env, c.args...)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !c.want(o) {
				t.Fatalf("got %+v, logging %+v", o.Agent, o.Logging)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	env := map[string]string{"NODE_NAME": "n"}
	cases := []struct {
		name, file string
		env        map[string]string
		args       []string
		want       string // in the error
	}{
		{"unknown flag", "", env, []string{"--cgroup-root=/x"}, "flag provided but not defined: -cgroup-root"},
		{"removed flag", "", env, []string{"--runtime-state-dir=/x"}, "not defined"},
		{"argument", "", env, []string{"extra"}, `unexpected argument "extra"`},
		{"bad flag value", "", env, []string{"--slots-per-gpu=many"}, "invalid syntax"},
		{"bad env value", "", map[string]string{"NODE_NAME": "n", "GPUSLICE_NODE_DAEMON": "perhaps"}, nil, "$GPUSLICE_NODE_DAEMON (daemon.enabled)"},
		{"no node name", "", nil, nil, "nodeName (--node-name, $NODE_NAME) is required"},
		{"range from file", header + "devicePlugin: {slotsPerGPU: 5}\n", env, nil, "devicePlugin.slotsPerGPU (--slots-per-gpu) 5: want 100.."},
		{"duration from file", header + "health: {period: soon}\n", env, nil, `health.period (--health-period): time: invalid duration "soon"`},
		{"duration from env", "", map[string]string{"NODE_NAME": "n", "GPUSLICE_NODE_RUNTIME_TIMEOUT": "-"}, nil, "runtime.timeout (--runtime-timeout)"},
		{"driver", header + "driver: cuda\n", env, nil, `driver (--driver): unknown driver mode "cuda"`},
		{"logging", header + "logging: {format: xml}\n", env, nil, "xml"},
		{"relative path", "", env, []string{"--run-dir=run"}, `daemon.runDir (--run-dir) "run": want an absolute path`},
		{"unknown field", header + "devicePlugin: {slots: 100}\n", env, nil, `unknown field "devicePlugin.slots"`},
		{"missing file", "", map[string]string{"NODE_NAME": "n", EnvConfig: "/nonexistent/gpuslice.yaml"}, nil, "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(t, c.file, c.env, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q in it", err, c.want)
			}
		})
	}
	if _, err := load(t, "", env, "-h"); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if o, err := load(t, header+"bogus: 1\n", nil, "--version"); err != nil || !o.ShowVersion {
		t.Fatalf("--version reads nothing else: %+v %v", o, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct{ file, want string }{
		{"", "apiVersion and kind are required"},
		{"[1, 2]", "want a mapping"},
		{"kind: NodeConfig\n", "apiVersion and kind are required"},
		{"apiVersion: gpuslice.io/v1alpha1\nkind: GPUNode\n", `kind "GPUNode": want NodeConfig`},
		{"apiVersion: gpuslice.io/v9\nkind: NodeConfig\n", `apiVersion "gpuslice.io/v9": this gpuslice-node reads gpuslice.io/v1alpha1`},
		{header + "resync: 1s\nresync: 2s\n", `key "resync" already set`},
		{header + "Resync: 1s\n", `unknown field "Resync"`},
		{header + "dra: {enable: true}\n", `unknown field "dra.enable"`},
		{header + "daemon: {enabled: 3}\n", "daemon.enabled"},
		{header + "health: {skipXIDs: [-1]}\n", "health.skipXIDs"},
		{header + "a: [\n", "YAML"},
		{header + "---\n" + header, "2 YAML documents: want one"},
		{header + "x: " + strings.Repeat("y", MaxFileBytes) + "\n", "limit"},
	}
	for _, c := range cases {
		def := FromAgent(agent.DefaultConfig(func(string) string { return "" }))
		n := def
		err := Decode([]byte(c.file), &n)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60q: error %v, want %q in it", c.file, err, c.want)
		}
	}
}

// TestRoundTrip: the file form of the defaults converts back to them, and a
// file naming every default changes nothing.
func TestRoundTrip(t *testing.T) {
	d := agent.DefaultConfig(func(k string) string { return map[string]string{"NODE_NAME": "n"}[k] })
	d.HealthSkipXIDs = []uint64{48}
	back, err := ToAgent(FromAgent(d), d)
	if err != nil || !reflect.DeepEqual(back, d) {
		t.Fatalf("round trip:\n%+v\n%+v\n%v", back, d, err)
	}
}

// TestSettings: every setting's flag has its environment variable and a
// file field that exists in the file's layout, named once.
func TestSettings(t *testing.T) {
	var n v1.NodeConfig
	f := newFlagSet(&n)
	fields := map[string]bool{}
	for _, s := range f.settings {
		if fields[s.Field] {
			t.Errorf("field %s set by two flags", s.Field)
		}
		fields[s.Field] = true
		if !hasField(reflect.TypeOf(n), strings.Split(s.Field, ".")) {
			t.Errorf("--%s: no field %s in NodeConfig", s.Flag, s.Field)
		}
		if s.Name() != s.Field+" (--"+s.Flag+")" {
			t.Errorf("Name() = %s", s.Name())
		}
	}
	for _, s := range f.settings {
		if fl := f.fs.Lookup(s.Flag); fl == nil || !strings.HasPrefix(fl.Usage, s.Usage) {
			t.Errorf("--%s: not registered with its usage", s.Flag)
		}
	}
	if len(f.settings) < 39 {
		t.Errorf("%d settings, want the 39 of v1alpha1 at least (a field of the file is never taken back)", len(f.settings))
	}
	if EnvName("slots-per-gpu") != "GPUSLICE_NODE_SLOTS_PER_GPU" {
		t.Errorf("env name %s", EnvName("slots-per-gpu"))
	}
}

// hasField reports whether the JSON path names a field of t.
func hasField(t reflect.Type, path []string) bool {
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if strings.Split(sf.Tag.Get("json"), ",")[0] != path[0] {
			continue
		}
		if len(path) == 1 {
			return true
		}
		return sf.Type.Kind() == reflect.Struct && hasField(sf.Type, path[1:])
	}
	return false
}

// TestExample: the documented example decodes, validates and states the
// defaults (library and node name aside).
func TestExample(t *testing.T) {
	data, err := os.ReadFile("../../docs/examples/node-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env := func(k string) string { return map[string]string{"NODE_NAME": "n"}[k] }
	d := agent.DefaultConfig(env)
	d.RunDir, d.Socket, d.MPSDir = "/run/gpuslice", "/run/gpuslice/node.sock", "/run/gpuslice/mps" // as root
	n := FromAgent(d)
	if err := Decode(data, &n); err != nil {
		t.Fatal(err)
	}
	c, err := ToAgent(n, d)
	if err == nil {
		err = c.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	c.Library = ""
	c.HealthSkipXIDs = nil
	if !reflect.DeepEqual(c, d) {
		t.Fatalf("example differs from the defaults:\n%+v\n%+v", c, d)
	}
}

// TestDecodeOneDocument: document markers around the one document are fine.
func TestDecodeOneDocument(t *testing.T) {
	n := FromAgent(agent.DefaultConfig(func(string) string { return "" }))
	if err := Decode([]byte("---\n"+header+"resync: 3s\n---\n"), &n); err != nil || n.Resync != "3s" {
		t.Fatalf("resync %q, %v", n.Resync, err)
	}
}

// TestSettingsTableFresh: docs/node-agent.md's settings table is the one
// agent.NodeSettings makes (go generate ./internal/nodeconfig rewrites it): a
// setting added, changed or removed in the table and not in the docs fails.
func TestSettingsTableFresh(t *testing.T) {
	doc, err := os.ReadFile("../../docs/node-agent.md")
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := ReplaceTable(doc)
	if err != nil {
		t.Fatal(err)
	}
	if string(fresh) != string(doc) {
		t.Fatal("docs/node-agent.md's settings table is stale: run go generate ./internal/nodeconfig")
	}
	for _, s := range agent.NodeSettings() {
		if !strings.Contains(SettingsTable(), "| `--"+s.Flag+"` | `"+EnvName(s.Flag)+"` | `"+s.Field+"` |") {
			t.Errorf("--%s: no row", s.Flag)
		}
	}
}

// TestExampleHasEveryDefault: docs/examples/node-config.yaml ("the full
// example with every default") names every setting that has a default (one
// without, e.g. kubeconfig, is optional): a setting added to the table with a
// default and not to the example fails.
func TestExampleHasEveryDefault(t *testing.T) {
	data, err := os.ReadFile("../../docs/examples/node-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ex map[string]any
	if err := yaml.Unmarshal(data, &ex); err != nil {
		t.Fatal(err)
	}
	defaults := FromAgent(agent.DefaultConfig(func(string) string { return "" }))
	for _, s := range agent.NodeSettings() {
		if reflect.ValueOf(s.File(&defaults)).Elem().IsZero() {
			continue
		}
		var v any = ex
		for _, k := range strings.Split(s.Field, ".") {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		if v == nil {
			t.Errorf("%s (--%s) has a default and is not in docs/examples/node-config.yaml", s.Field, s.Flag)
		}
	}
}

// TestGoFilesFresh: Config's fields (agent.NodeValues) and the versioned
// file's types are what `go generate ./internal/nodeconfig` writes from the
// rows of agent.NodeSettings, and every row's fields exist: a row added
// without generating fails here.
func TestGoFilesFresh(t *testing.T) {
	for file, src := range map[string]func() ([]byte, error){ConfigFile: ConfigSource, FileTypesFile: FileTypesSource} {
		want, err := src()
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("../..", file))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s is stale: run go generate ./internal/nodeconfig", file)
		}
	}
	var c agent.Config
	var n v1.NodeConfig
	for _, s := range agent.NodeSettings() {
		if got := reflect.TypeOf(s.File(&n)).Elem(); got != s.FileType {
			t.Errorf("--%s: file field %s of type %v, want %v", s.Flag, s.Field, got, s.FileType)
		}
		if s.ConfigField == "" {
			continue
		}
		if f, ok := reflect.TypeOf(c).FieldByName(s.ConfigField); !ok || f.Type != s.ConfigType {
			t.Errorf("--%s: Config.%s of type %v (found %v), want %v", s.Flag, s.ConfigField, f.Type, ok, s.ConfigType)
		}
	}
}

// TestGoName: the file's Go names of JSON names, initialisms kept.
func TestGoName(t *testing.T) {
	for json, want := range map[string]string{"nodeName": "NodeName", "cdiKind": "CDIKind", "cdiSpecDir": "CDISpecDir",
		"mps": "MPS", "dra": "DRA", "skipXIDs": "SkipXIDs", "dramatic": "Dramatic", "slotsPerGPU": "SlotsPerGPU"} {
		if got := goName(json); got != want {
			t.Errorf("goName(%q) = %q, want %q", json, got, want)
		}
	}
}
