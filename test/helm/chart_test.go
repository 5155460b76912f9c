//go:build helmchart

package helm

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"sigs.k8s.io/yaml"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/nodeconfig"
	"github.com/gpuslice/gpuslice/internal/sched"
	"github.com/gpuslice/gpuslice/test/k8sversion"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const chart = "../../deploy/helm/gpuslice"

// kubeVersion is the Kubernetes version the chart is rendered for (hack/k8s/version).
func kubeVersion(t *testing.T) string {
	t.Helper()
	v, err := k8sversion.Read()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func helmBin(t *testing.T) string {
	t.Helper()
	h := os.Getenv("GPUSLICE_HELM")
	if h == "" {
		t.Fatal("GPUSLICE_HELM is not set (run through make test-helm)")
	}
	return h
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, stderr bytes.Buffer
	cmd := exec.Command(helmBin(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if err != nil {
		return out.String() + stderr.String(), err
	}
	return out.String(), nil
}

func TestLint(t *testing.T) {
	for _, v := range valueFiles(t) {
		args := []string{"lint", "--strict", "--kube-version", kubeVersion(t), chart}
		if v != "" {
			args = append(args, "-f", v)
		}
		if out, err := helm(t, args...); err != nil {
			t.Fatalf("helm %v: %v\n%s", args, err, out)
		}
	}
}

// valueFiles: "" (the chart's defaults) and every testdata/*.values.yaml.
func valueFiles(t *testing.T) []string {
	files, err := filepath.Glob("testdata/*.values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{""}, files...)
}

func render(t *testing.T, values string, set ...string) string {
	t.Helper()
	args := []string{"template", "gs", chart, "--namespace", "gpuslice-system", "--kube-version", kubeVersion(t)}
	if values != "" {
		args = append(args, "-f", values)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
	return out
}

func TestTemplateGolden(t *testing.T) {
	for _, v := range valueFiles(t) {
		name := "default"
		if v != "" {
			name = strings.TrimSuffix(filepath.Base(v), ".values.yaml")
		}
		t.Run(name, func(t *testing.T) {
			all := render(t, v)
			checkObjects(t, all)
			out := withoutCRD(all)
			golden := filepath.Join("testdata", name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (make helm-golden writes it)", err)
			}
			if out != string(want) {
				t.Fatalf("helm template with %q differs from %s (make helm-golden rewrites it; review the diff):\n%s", v, golden, diff(string(want), out))
			}
		})
	}
}

// withoutCRD drops the CRD's document: it is deploy/crds' CRD (checked equal
// in checkObjects), which changes with the API, not with the chart.
func withoutCRD(out string) string {
	docs := strings.Split(out, "\n---\n")
	kept := docs[:0]
	for _, d := range docs {
		if !strings.Contains(d, "\nkind: CustomResourceDefinition\n") {
			kept = append(kept, d)
		}
	}
	return strings.Join(kept, "\n---\n")
}

// diff names the first differing line.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, a, b)
		}
	}
	return ""
}

// checkObjects decodes every rendered document strictly (unknown or
// misspelt fields fail), checks the CRD against deploy/crds and loads the
// scheduler's configuration and plugin arguments as the scheduler does.
func checkObjects(t *testing.T, out string) {
	t.Helper()
	sch := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
	if err := apiextv1.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
	dec := serializer.NewCodecFactory(sch, serializer.EnableStrict).UniversalDeserializer()
	kinds := map[string]int{}
	for _, doc := range strings.Split(out, "\n---\n") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
			continue
		}
		obj, gvk, err := dec.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("rendered object does not decode strictly: %v\n%s", err, doc)
		}
		kinds[gvk.Kind]++
		switch o := obj.(type) {
		case *apiextv1.CustomResourceDefinition:
			checkCRD(t, o)
		case *corev1.ConfigMap:
			if c, ok := o.Data["config.yaml"]; ok {
				checkSchedulerConfig(t, c)
			}
			if c, ok := o.Data["node-config.yaml"]; ok {
				checkNodeConfig(t, c)
			}
		}
	}
	if kinds["CustomResourceDefinition"] != 1 {
		t.Fatalf("rendered kinds %v: want one CRD", kinds)
	}
}

func checkCRD(t *testing.T, got *apiextv1.CustomResourceDefinition) {
	t.Helper()
	b, err := os.ReadFile("../../deploy/crds/gpuslice.io_gpunodes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want apiextv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Spec, want.Spec) {
		t.Fatal("the chart's CRD spec differs from deploy/crds/gpuslice.io_gpunodes.yaml")
	}
}

func checkSchedulerConfig(t *testing.T, c string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(c), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sched.RegisterArgs(); err != nil {
		t.Fatal(err)
	}
	cfg, err := options.LoadConfigFromFile(klog.Background(), path)
	if err != nil {
		t.Fatalf("scheduler configuration: %v\n%s", err, c)
	}
	found := false
	for _, p := range cfg.Profiles {
		for _, pc := range p.PluginConfig {
			if pc.Name == sched.Name {
				if _, err := sched.DecodeArgs(pc.Args); err != nil {
					t.Fatalf("GPUSlice args: %v", err)
				}
				found = true
			}
		}
	}
	if !found {
		t.Fatal("no GPUSlice plugin configuration in the scheduler's ConfigMap")
	}
}

// checkNodeConfig reads the agent's configuration file as gpuslice-node does
// (strictly, validated; the node name from the downward API's $NODE_NAME).
func checkNodeConfig(t *testing.T, c string) agent.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "node-config.yaml")
	if err := os.WriteFile(path, []byte(c), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) { return map[string]string{"NODE_NAME": "n1"}[k], k == "NODE_NAME" }
	o, err := nodeconfig.Load([]string{"--config", path}, env, io.Discard)
	if err != nil {
		t.Fatalf("gpuslice-node configuration: %v\n%s", err, c)
	}
	return o.Agent
}

// TestNodeConfig: node.config reaches the agent's file, merged over the
// node.* values; a mounted path in node.config is refused.
func TestNodeConfig(t *testing.T) {
	all := render(t, "", "node.config.sharing.mode=mps", "node.config.health.skipXIDs={48,79}", "node.slotsPerGPU=200", "node.verbosity=4")
	var cfg agent.Config
	for _, doc := range strings.Split(all, "\n---\n") {
		if strings.Contains(doc, "node-config.yaml:") {
			var cm corev1.ConfigMap
			if err := yaml.UnmarshalStrict([]byte(doc), &cm); err != nil {
				t.Fatal(err)
			}
			cfg = checkNodeConfig(t, cm.Data["node-config.yaml"])
		}
	}
	if cfg.Sharing != "mps" || !reflect.DeepEqual(cfg.HealthSkipXIDs, []uint64{48, 79}) || cfg.SlotsPerGPU != 200 ||
		cfg.RunDir != "/run/gpuslice" || cfg.Library != "/var/lib/gpuslice/libgpuslice.so" || cfg.MetricsAddress != ":9446" {
		t.Fatalf("agent configuration from the chart: %+v", cfg)
	}
	out, err := helm(t, "template", "gs", chart, "--kube-version", kubeVersion(t), "--set", "node.config.daemon.runDir=/x")
	if err == nil || !strings.Contains(out, "node.config.daemon.runDir: set it through its node.* value") {
		t.Fatalf("node.config.daemon.runDir: err %v, output:\n%s", err, out)
	}
}

// TestTemplateErrors: a bad combination of values fails with the reason.
func TestTemplateErrors(t *testing.T) {
	out, err := helm(t, "template", "gs", chart, "--kube-version", kubeVersion(t), "--set", "apiServer.host=10.0.0.1")
	if err == nil || !strings.Contains(out, "apiServer.port is required") {
		t.Fatalf("apiServer.host without a port: err %v, output:\n%s", err, out)
	}
	out, err = helm(t, "template", "gs", chart, "--kube-version", kubeVersion(t), "--set", "devicePlugin.enabled=true")
	if err == nil || !strings.Contains(out, "pick one path for the nodes' GPUs") {
		t.Fatalf("DRA and the device plugin both on: err %v, output:\n%s", err, out)
	}
}
