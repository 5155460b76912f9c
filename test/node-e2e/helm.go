//go:build nodee2e

package nodee2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

const (
	release   = "gs"
	releaseNS = "gpuslice-system"
	chartDir  = "../../deploy/helm/gpuslice"
	// e2eValues is the chart's e2e values file (also rendered by make test-helm).
	e2eValues = "../helm/testdata/e2e.values.yaml"
	// The images are built twice, under two tags: install one, upgrade to the other.
	tag1, tag2 = "e2e-1", "e2e-2"
	// libraryDir is the chart's default node.libraryDir (in the test's tmpfs /var/lib).
	libraryDir = "/var/lib/gpuslice"
	pluginDir  = "/var/lib/kubelet/device-plugins"
)

// helmNode is a node whose gpuslice is installed by helm.
type helmNode struct {
	*node
	helmBin string
	// values is the test's values file (paths of this run, the API server port).
	values  string
	runDir  string
	cdiDir  string
	resizer *corev1.Pod
	// seen are the UIDs of every GPU pod the test ran (their cgroups are checked for device rules).
	seen []string
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// startHelmNode starts the control plane as a real cluster has it (tokens,
// RBAC, kube-controller-manager, the stock scheduler), containerd with the
// test images and both tags of the gpuslice images, and the kubelet of a
// node labelled as a GPU node. Nothing of gpuslice runs yet.
func startHelmNode(t *testing.T, ctx context.Context) *helmNode {
	kubelet := need(t, "GPUSLICE_KUBELET")
	kcm := need(t, "GPUSLICE_KCM")
	images := need(t, "GPUSLICE_IMAGES")
	n, bins := newNode(t, ctx, harness.Options{InCluster: true})
	h := &helmNode{node: n, helmBin: need(t, "GPUSLICE_HELM"), runDir: filepath.Join(n.dir, "run"), cdiDir: filepath.Join(n.dir, "cdi")}
	p, err := n.cp.StartControllerManager(ctx, kcm)
	if err != nil {
		t.Fatal(err)
	}
	n.procs = append(n.procs, p)
	if p, err = n.cp.StartScheduler(ctx, bins.Path("kube-scheduler"), "kube-scheduler",
		harness.SchedulerOptions{SchedulerName: corev1.DefaultSchedulerName}); err != nil {
		t.Fatal(err)
	}
	n.procs = append(n.procs, p)
	if err := os.MkdirAll(h.runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The simulated GPU's state, where the agent's container sees it (the run directory).
	n.simState = filepath.Join(h.runDir, "sim.state")
	n.simGPUs()
	n.images()
	for _, tag := range []string{tag1, tag2} {
		for _, img := range []string{"gpuslice-node", "gpuslice-scheduler"} {
			n.extraImages = append(n.extraImages, filepath.Join(images, tag, img+".tar"))
		}
	}
	n.nodeLabels = "nvidia.com/gpu.present=true"
	n.startContainerd(ctx)
	n.startKubelet(ctx, kubelet)
	h.writeValues()
	return h
}

// writeValues: what this run adds to the e2e values file.
func (h *helmNode) writeValues() {
	port, err := harness.FreePort()
	if err != nil {
		h.t.Fatal(err)
	}
	v := fmt.Sprintf(`apiServer: {host: "127.0.0.1", port: "%d"}
node:
  simDir: %q
  devRoot: %q
  runDir: %q
  runtimeEndpoint: %q
  cdiSpecDir: %q
  metricsPort: %d
  extraEnv:
  - {name: GPUSLICE_SIM_GPUS, value: "%d"}
  - {name: GPUSLICE_SIM_MEMORY, value: 16GiB}
  - {name: GPUSLICE_SIM_CONTEXT_MEMORY, value: "0"}
  - {name: GPUSLICE_SIM_STATE, value: %q}
`, h.cp.Port, filepath.Join(h.bin, "sim"), filepath.Join(h.dir, "dev"), h.runDir,
		"unix://"+h.ctrSock, h.cdiDir, port, numGPUs, h.simState)
	h.values = filepath.Join(h.dir, "values.yaml")
	if err := os.WriteFile(h.values, []byte(v), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// helm runs the helm binary against the test's cluster (its own config and
// cache directories).
func (h *helmNode) helm(args ...string) {
	cmd := exec.Command(h.helmBin, append(args, "--kubeconfig", h.cp.Kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(h.dir, "helm", "config"),
		"HELM_CACHE_HOME="+filepath.Join(h.dir, "helm", "cache"), "HELM_DATA_HOME="+filepath.Join(h.dir, "helm", "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		h.t.Fatalf("helm %s: %v\n%s\n%s", strings.Join(args, " "), err, out, h.releasePods())
	}
}

// releasePods describes the release's pods, for failure messages.
func (h *helmNode) releasePods() string {
	l, err := h.cp.Client.CoreV1().Pods(releaseNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range l.Items {
		fmt.Fprintf(&b, "pod %s: %s %+v\n", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		logs, _ := filepath.Glob(filepath.Join(h.podLogs, fmt.Sprintf("%s_%s_%s", releaseNS, p.Name, p.UID), "*", "*.log"))
		if len(logs) > 0 {
			out, _ := os.ReadFile(logs[len(logs)-1])
			fmt.Fprintf(&b, "%s (end):\n%s\n", logs[len(logs)-1], out[max(0, len(out)-1500):])
		}
	}
	return b.String()
}

func (h *helmNode) waitServiceAccount(ctx context.Context, namespace string) {
	if err := harness.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		_, err := h.cp.Client.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		h.t.Fatalf("no default ServiceAccount in %s: %v", namespace, err)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil
		}
	}
	return false
}

// waitInstalled waits until the release runs tag only: one agent pod,
// ready (its device plugins registered), every scheduler replica ready and
// one of them holding the leader Lease it took after since; and the agent's
// row published with every GPU. It returns the agent pod.
func (h *helmNode) waitInstalled(ctx context.Context, tag string, since time.Time) *corev1.Pod {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	var agent *corev1.Pod
	state := ""
	err := harness.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		l, err := h.cp.Client.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		agents, scheds, ready := 0, 0, 0
		for i := range l.Items {
			p := &l.Items[i]
			if !strings.HasSuffix(p.Spec.Containers[0].Image, ":"+tag) {
				state = "pod " + p.Name + " runs " + p.Spec.Containers[0].Image
				return false, nil
			}
			switch p.Labels["app.kubernetes.io/component"] {
			case "node":
				agents++
				agent = p
			case "scheduler":
				scheds++
			}
			if podReady(p) {
				ready++
			}
			for _, c := range p.Status.ContainerStatuses {
				if c.RestartCount >= 3 {
					return false, fmt.Errorf("pod %s: container %s restarted %d times: %+v", p.Name, c.Name, c.RestartCount, c.LastTerminationState)
				}
			}
		}
		if agents != 1 || scheds < 1 || ready != agents+scheds {
			state = fmt.Sprintf("%d agent pods, %d scheduler pods, %d ready", agents, scheds, ready)
			return false, nil
		}
		lease, err := h.cp.Client.CoordinationV1().Leases(releaseNS).Get(ctx, "gpuslice-scheduler", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" ||
			lease.Spec.AcquireTime == nil || lease.Spec.AcquireTime.Time.Before(since.Truncate(time.Second)) {
			state = fmt.Sprintf("no leader since the start (%v)", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		h.t.Fatalf("release never ran %s: %v (%s)\n%s", tag, err, state, h.releasePods())
	}
	h.agentLog = filepath.Join(h.podLogs, fmt.Sprintf("%s_%s_%s", releaseNS, agent.Name, agent.UID), "agent", "0.log")
	h.waitRow(ctx, "published by the agent pod", since, func(g *v1alpha2.GPUNode) bool { return len(g.Status.GPUs) == numGPUs })
	return agent
}

// leftovers lists what gpuslice left on the cluster and the node: the
// release's objects (namespaced, cluster-wide, the CRD and its rows: the
// chart removes the CRD by default), files in the host directories the
// agent uses, and device rules or eBPF device programs in the cgroups of the
// test's GPU pods (which must be gone).
func (h *helmNode) leftovers(ctx context.Context) []string {
	var left []string
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
	ignore := map[string]bool{"configmaps/kube-root-ca.crt": true, "serviceaccounts/default": true}
	for _, r := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "configmaps"}, {Version: "v1", Resource: "secrets"},
		{Version: "v1", Resource: "serviceaccounts"}, {Version: "v1", Resource: "services"},
		{Group: "apps", Version: "v1", Resource: "daemonsets"}, {Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "apps", Version: "v1", Resource: "replicasets"}, {Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
	} {
		l, err := h.cp.Dynamic.Resource(r).Namespace(releaseNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			h.t.Fatalf("list %s: %v", r.Resource, err)
		}
		for _, o := range l.Items {
			if name := r.Resource + "/" + o.GetName(); !ignore[name] {
				left = append(left, releaseNS+"/"+name)
			}
		}
	}
	for _, r := range []string{"clusterroles", "clusterrolebindings"} {
		l, err := h.cp.Dynamic.Resource(schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: r}).List(ctx, sel)
		if err != nil {
			h.t.Fatalf("list %s: %v", r, err)
		}
		for _, o := range l.Items {
			left = append(left, r+"/"+o.GetName())
		}
	}
	rb, err := h.cp.Client.RbacV1().RoleBindings("kube-system").List(ctx, sel)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, o := range rb.Items {
		left = append(left, "kube-system/rolebindings/"+o.Name)
	}
	crd := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := h.cp.Dynamic.Resource(crd).Get(ctx, "gpunodes.gpuslice.io", metav1.GetOptions{}); err == nil {
		left = append(left, "customresourcedefinitions/gpunodes.gpuslice.io")
		rows, err := h.cp.GPUNodes.GpusliceV1alpha2().GPUNodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			h.t.Fatal(err)
		}
		for _, o := range rows.Items {
			left = append(left, "gpunodes/"+o.Name)
		}
	} else if !apierrors.IsNotFound(err) {
		h.t.Fatal(err)
	}
	return append(left, h.hostLeftovers()...)
}

// hostLeftovers: files in the library, run, CDI and device-plugin
// directories (the simulated GPU's state, the kubelet's socket and its
// device checkpoint are not gpuslice's), the test pods' cgroups (their device rules and programs).
func (h *helmNode) hostLeftovers() []string {
	var left []string
	skip := map[string]bool{h.simState: true, filepath.Join(pluginDir, "kubelet.sock"): true,
		filepath.Join(pluginDir, "kubelet_internal_checkpoint"): true}
	for _, d := range []string{libraryDir, h.runDir, h.cdiDir, pluginDir} {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !e.IsDir() && !skip[p] {
				left = append(left, "file "+p)
			}
			return nil
		})
		if err != nil {
			h.t.Fatalf("walk %s: %v", d, err)
		}
	}
	left = append(left, h.podCgroups()...)
	return left
}

// podCgroups lists the cgroups (device controller v1, or v2) of the test's
// GPU pods that still exist: the device rules the agent wrote are in them.
func (h *helmNode) podCgroups() []string {
	var left []string
	for _, uid := range h.seen {
		for _, root := range []string{"/sys/fs/cgroup/devices", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
			root = filepath.Join(root, h.cgroupRoot)
			for _, pat := range []string{"kubepods*/*pod" + uid + "*", "kubepods*/*/*pod" + uid + "*"} {
				m, _ := filepath.Glob(filepath.Join(root, pat))
				for _, c := range m {
					left = append(left, "cgroup "+c)
				}
			}
		}
	}
	return left
}

// stop takes the node down.
func (h *helmNode) stop() { h.node.stop() }
