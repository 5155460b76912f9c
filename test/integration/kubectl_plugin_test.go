//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/testbin"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// topGPU is what the test reads of a GPU in `kubectl gpuslice top -o json`
// (decoded as any script would, without gpuslice's Go types). This package
// must not import internal/kubectlplugin: cli-runtime brings in Go's plugin
// package, with which the linker binds every symbol at start (BIND_NOW), and
// go-nvml's symbols (linked here through internal/gpunoderow) are then missing.
type topGPU struct {
	Index             int32  `json:"index"`
	UUID              string `json:"uuid"`
	UnitsTotal        int64  `json:"unitsTotal"`
	UnitsBooked       int64  `json:"unitsBooked"`
	MemoryBytes       int64  `json:"memoryBytes"`
	MemoryBookedBytes int64  `json:"memoryBookedBytes"`
	Pods              int    `json:"pods"`
}

// TestKubectlPlugin: the real scheduler places shares and a whole GPU; the
// real kubectl finds kubectl-gpuslice on PATH and runs it with kubectl's own
// kubeconfig flags; `top` reports per GPU what the pods' assignments book
// against the GPUNode row, `pods` which pod holds which share.
func TestKubectlPlugin(t *testing.T) {
	e, ns := setup(t)
	plugin := os.Getenv("GPUSLICE_KUBECTL_PLUGIN")
	if plugin == "" {
		testbin.Missing(t, "needs GPUSLICE_KUBECTL_PLUGIN (bin/kubectl-gpuslice; make test-cluster sets it)")
	}
	node := ns + "-n-0"
	e.nodes(t, ns+"-n", 1, 2)
	e.startScheduler(t, ns+"-sched", staticRows)
	reqs := map[string]harness.GPURequest{
		"half": {Units: 50, Memory: 4 * harness.GiB}, "third": {Units: 30, Memory: 2 * harness.GiB}, "whole": {GPUs: 1},
	}
	for name, r := range reqs {
		e.createPod(t, ns, name, ns+"-sched", r)
	}
	bound := e.waitBound(t, ns, "half", "third", "whole")
	want, shares := booked(t, bound)
	kubectl := e.kubectlPlugin(t, plugin)
	checkTop(t, e, kubectl, node, want)
	checkPods(t, kubectl, ns, node, bound, shares)
}

// kubectlPlugin runs `kubectl gpuslice ARGS` with the real kubectl, which
// finds the plugin on PATH, and returns its output.
func (e *env) kubectlPlugin(t *testing.T, plugin string) func(args ...string) string {
	dir := filepath.Dir(plugin) // kubectl finds plugins on PATH
	return func(args ...string) string {
		t.Helper()
		cmd := exec.Command(e.bins.Path("kubectl"), append([]string{"gpuslice"}, append(args, "--kubeconfig", e.cp.Kubeconfig)...)...)
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kubectl gpuslice %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
}

// booked is what the pods' assignments book per GPU index, and the number
// of shares (a pod's part of one GPU).
func booked(t *testing.T, bound map[string]*corev1.Pod) (map[int32]topGPU, int) {
	want := map[int32]topGPU{}
	shares := 0
	for _, p := range bound {
		for idx, g := range assignment(t, p).Totals() {
			w := want[idx]
			w.UnitsBooked += g.Units
			w.MemoryBookedBytes += g.MemoryBytes
			w.Pods++
			want[idx] = w
			shares++
		}
	}
	return want, shares
}

// checkTop: `top` reports per GPU of node what the pods book (want, by GPU
// index) against its GPUNode row.
func checkTop(t *testing.T, e *env, kubectl func(...string) string, node string, want map[int32]topGPU) {
	var top struct {
		Kind  string `json:"kind"`
		Nodes []struct {
			Name  string   `json:"name"`
			State string   `json:"state"`
			GPUs  []topGPU `json:"gpus"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(kubectl("top", node, "-o", "json")), &top); err != nil {
		t.Fatal(err)
	}
	g, err := e.cp.GPUNodes.GpusliceV1alpha2().GPUNodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if top.Kind != "GPUTop" || len(top.Nodes) != 1 || top.Nodes[0].Name != node || top.Nodes[0].State != string(g.Status.State) ||
		len(top.Nodes[0].GPUs) != len(g.Status.GPUs) {
		t.Fatalf("top: %+v, GPUNode %+v", top, g.Status)
	}
	for i, got := range top.Nodes[0].GPUs {
		w, row := want[got.Index], g.Status.GPUs[i]
		if got.UnitsBooked != w.UnitsBooked || got.MemoryBookedBytes != w.MemoryBookedBytes || got.Pods != w.Pods ||
			got.UnitsTotal != row.UnitsTotal || got.MemoryBytes != row.Memory.Value() || got.UUID != row.UUID {
			t.Errorf("GPU %d: %+v; want booked %+v of the row's %+v", got.Index, got, w, row)
		}
	}
	if table := kubectl("top", node); !strings.Contains(table, "UNITS") || !strings.Contains(table, node) {
		t.Errorf("top table:\n%s", table)
	}
}

// checkPods: `pods` lists which of the bound pods of namespace ns holds
// which of the shares, and nothing of ns in another namespace.
func checkPods(t *testing.T, kubectl func(...string) string, ns, node string, bound map[string]*corev1.Pod, shares int) {
	var pods struct {
		Kind  string `json:"kind"`
		Items []struct {
			Namespace string `json:"namespace"`
			Pod       string `json:"pod"`
			Node      string `json:"node"`
			GPUIndex  int32  `json:"gpuIndex"`
			Units     int64  `json:"units"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(kubectl("pods", "-n", ns, "-o", "json")), &pods); err != nil {
		t.Fatal(err)
	}
	if pods.Kind != "GPUPodList" || len(pods.Items) != shares {
		t.Fatalf("pods: %+v; want %d shares", pods, shares)
	}
	for _, s := range pods.Items {
		a := assignment(t, bound[s.Pod])
		if s.Namespace != ns || s.Node != node || s.Node != a.Node || s.Units != a.Totals()[s.GPUIndex].Units {
			t.Errorf("share %+v; assignment %+v", s, a)
		}
	}
	if wide := kubectl("pods", "-n", ns, "-o", "wide"); strings.Count(wide, ns+" ") != shares || !strings.Contains(wide, "EXCLUSIVE") {
		t.Errorf("pods -o wide:\n%s", wide)
	}
	if other := kubectl("pods", "-n", "default"); strings.Contains(other, ns) {
		t.Errorf("pods -n default lists the test's pods:\n%s", other)
	}
}
