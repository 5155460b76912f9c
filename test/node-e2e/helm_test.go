//go:build nodee2e

package nodee2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// TestHelm installs gpuslice with `helm install` from deploy/helm/gpuslice
// on a real node (etcd, kube-apiserver with ServiceAccount tokens and RBAC,
// kube-controller-manager, the stock kube-scheduler for the chart's own pods,
// kubelet, containerd, runc): the agent runs as the DaemonSet's pod and
// gpuslice-scheduler as the Deployment's pods, from the images `make images`
// builds (imported into containerd). Share pods get their memory limit;
// `helm upgrade` to a new image tag while they run keeps every pod's GPUs,
// limit and share, and a resize works after it; `helm uninstall` (after the
// GPU pods are deleted) leaves nothing: objects, host files, device rules,
// eBPF programs are counted. Last line:
// "helm install ready in <s> s, upgrade kept <n>/<n> pods, uninstall left <k> objects".
func TestHelm(t *testing.T) {
	if !privateMountNS(t, "TestHelm") {
		return
	}
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(tctx, 15*time.Minute)
	defer cancel()
	h := startHelmNode(t, ctx)
	defer h.stop()
	if _, err := h.cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitServiceAccount(ctx, ns)
	baseline := h.leftovers(ctx)
	if len(baseline) != 0 {
		t.Fatalf("before the install: %v", baseline)
	}

	start := time.Now()
	h.helm("install", release, chartDir, "--namespace", releaseNS, "--create-namespace", "--wait", "--timeout", "5m",
		"-f", e2eValues, "-f", h.values, "--set", "image.tag="+tag1)
	agent := h.waitInstalled(ctx, tag1, start)
	ready := time.Since(start)
	t.Logf("e2e helm: installed, agent pod %s and the scheduler ready %.1f s after helm install started", agent.Name, ready.Seconds())

	pods := h.sharePods(ctx)
	before := h.observe(ctx, pods)

	upStart := time.Now()
	h.helm("upgrade", release, chartDir, "--namespace", releaseNS, "--reuse-values", "--set", "image.tag="+tag2,
		"--wait", "--timeout", "5m")
	newAgent := h.waitInstalled(ctx, tag2, upStart)
	if newAgent.UID == agent.UID {
		t.Fatalf("helm upgrade to %s kept the agent pod %s", tag2, agent.Name)
	}
	t.Logf("e2e helm: upgraded to %s in %.1f s (agent pod %s)", tag2, time.Since(upStart).Seconds(), newAgent.Name)
	kept := h.kept(ctx, pods, before, upStart)
	h.resizeAfterUpgrade(ctx)

	for _, p := range pods {
		if err := h.cp.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h.waitNoPods(ctx, ns)
	h.waitCgroupsGone(ctx)
	h.helm("uninstall", release, "--namespace", releaseNS, "--wait", "--timeout", "5m")
	h.waitNoPods(ctx, releaseNS)
	helmSummary(t, ready, kept, len(pods), h.leftovers(ctx))
}

// helmSummary prints (and writes to $GPUSLICE_E2E_SUMMARY) the last line and
// fails the test unless every pod was kept and nothing was left.
func helmSummary(t *testing.T, ready time.Duration, kept, pods int, left []string) {
	for _, l := range left {
		t.Logf("e2e helm: left after uninstall: %s", l)
	}
	line := fmt.Sprintf("helm install ready in %.1f s, upgrade kept %d/%d pods, uninstall left %d objects", ready.Seconds(), kept, pods, len(left))
	fmt.Println(line)
	if path := os.Getenv("GPUSLICE_E2E_SUMMARY"); path != "" {
		if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
	if kept != pods {
		t.Errorf("helm upgrade: %d of %d GPU pods kept their GPUs, limit and share", kept, pods)
	}
	if len(left) != 0 {
		t.Errorf("helm uninstall left %d objects: %v", len(left), left)
	}
}

// sharePods starts the pods the upgrade must not disturb: two shares of a
// GPU (2 GiB and 3 GiB, 50 units each) and a whole-GPU pod (resized after
// the upgrade), each running the device probe; a new CUDA process in each
// sees its memory limit (the whole GPU's memory for the whole-GPU pod).
func (h *helmNode) sharePods(ctx context.Context) []*corev1.Pod {
	pods := []*corev1.Pod{
		h.createPod(ctx, gpuPod("share-0", 1, 2<<30, "", "/probe")),
		h.createPod(ctx, gpuPod("share-1", 1, 3<<30, "", "/probe")),
		h.createPod(ctx, gpuPod("resizer", 1, 0, "1", "/probe")),
	}
	for i, p := range pods {
		p = h.waitPod(ctx, p.Name, "running", running)
		h.waitUsable(ctx, p, h.minors(assignment(p), "main"), time.Time{})
		pods[i] = p
		h.seen = append(h.seen, string(p.UID))
	}
	h.resizer = pods[2]
	for _, p := range pods {
		if got, want := h.memoryTotal(p), memoryLimit(p); got != want {
			h.t.Fatalf("a CUDA process in %s sees %d bytes of GPU memory, its limit is %d", p.Name, got, want)
		}
	}
	h.t.Logf("e2e helm: 2 share pods and a whole-GPU pod running, their CUDA processes see their limits")
	return pods
}

// memoryLimit is the GPU memory the pod's processes may see: its share's
// limit, or the simulated GPU's 16 GiB.
func memoryLimit(p *corev1.Pod) int64 {
	if q, ok := p.Spec.Containers[0].Resources.Limits[api.ResourceMemory]; ok {
		return q.Value()
	}
	return 16 << 30
}

// podState is what must survive an upgrade.
type podState struct {
	uid    string
	minors []int
	row    v1alpha2.GPU // the agent's row for the pod's GPU (units and memory free)
}

func (h *helmNode) observe(ctx context.Context, pods []*corev1.Pod) map[string]podState {
	booked := map[string]int64{} // units the pods hold, by GPU UUID
	for _, p := range pods {
		if a := assignment(p); a != nil {
			for _, c := range a.Containers {
				for _, g := range c.GPUs {
					booked[g.UUID] += g.Units
				}
			}
		}
	}
	// A row that counts every pod's share (the agent publishes on change:
	// a row from before it saw the pods counts their GPUs free).
	row := h.waitRow(ctx, "counting the pods' shares", time.Time{}, func(g *v1alpha2.GPUNode) bool {
		n := 0
		for _, x := range g.Status.GPUs {
			if u, ok := booked[x.UUID]; ok && int64(x.UnitsTotal)-int64(x.UnitsFree) >= u {
				n++
			}
		}
		return n == len(booked)
	})
	out := map[string]podState{}
	for _, p := range pods {
		m := h.minors(assignment(p), "main")
		s := podState{uid: string(p.UID), minors: m}
		for _, g := range row.Status.GPUs {
			if len(m) == 1 && h.gpus[m[0]].UUID == g.UUID {
				s.row = g
			}
		}
		if s.row.UUID == "" {
			h.t.Fatalf("pod %s on GPUs %v: no row for its GPU in %+v", p.Name, m, row.Status.GPUs)
		}
		out[p.Name] = s
	}
	return out
}

// kept counts the pods that, after the upgrade, are the same running
// containers (no restart), never lost a GPU (every probe report since the
// upgrade began lists the same devices), whose new CUDA processes still see
// their memory limit, and whose share the new agent's row still counts.
func (h *helmNode) kept(ctx context.Context, pods []*corev1.Pod, before map[string]podState, since time.Time) int {
	after := h.observe(ctx, pods)
	// A row published by the new agent, after it has seen every pod.
	row := h.waitRow(ctx, "published by the new agent", time.Now(), func(*v1alpha2.GPUNode) bool { return true })
	kept := 0
	for _, p := range pods {
		b := before[p.Name]
		cur, err := h.cp.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			h.t.Errorf("pod %s after the upgrade: %v", p.Name, err)
			continue
		}
		var problems []string
		if string(cur.UID) != b.uid || cur.Status.Phase != corev1.PodRunning || cur.Status.ContainerStatuses[0].RestartCount != 0 {
			problems = append(problems, fmt.Sprintf("not the same running container (phase %s)", cur.Status.Phase))
		}
		for _, l := range h.probeLines(cur) {
			if !l.at.Before(since) && !slices.Equal(l.minors, b.minors) {
				problems = append(problems, fmt.Sprintf("usable GPUs %v at %s, had %v", l.minors, l.at.Format(time.RFC3339Nano), b.minors))
				break
			}
		}
		if got, want := h.memoryTotal(cur), memoryLimit(cur); got != want {
			problems = append(problems, fmt.Sprintf("a new CUDA process sees %d bytes, limit %d", got, want))
		}
		for _, g := range row.Status.GPUs {
			if g.UUID == b.row.UUID && (g.UnitsFree != b.row.UnitsFree || g.MemoryFree.Value() != b.row.MemoryFree.Value()) {
				problems = append(problems, fmt.Sprintf("its GPU's row: %d units, %d bytes free; before: %d, %d",
					g.UnitsFree, g.MemoryFree.Value(), b.row.UnitsFree, b.row.MemoryFree.Value()))
			}
		}
		if slices.Equal(after[p.Name].minors, b.minors) && len(problems) == 0 {
			kept++
			continue
		}
		h.t.Errorf("pod %s after the upgrade: %v", p.Name, problems)
	}
	return kept
}

// resizeAfterUpgrade: the new leader's resize controller and the new agent
// give the whole-GPU pod a second GPU.
func (h *helmNode) resizeAfterUpgrade(ctx context.Context) {
	t0 := h.setWant(ctx, h.resizer.Name, "2")
	cur := h.waitPod(ctx, h.resizer.Name, "assigned 2 GPUs", func(p *corev1.Pod) bool {
		a := assignment(p)
		return a != nil && len(h.minors(a, "main")) == 2
	})
	seen := h.waitUsable(ctx, cur, h.minors(assignment(cur), "main"), t0)
	h.t.Logf("e2e helm: after the upgrade, a resize 1 -> 2 GPUs usable in the container %v after the annotation changed",
		seen.Sub(t0).Round(time.Millisecond))
}

func (h *helmNode) waitNoPods(ctx context.Context, namespace string) {
	var left []string
	err := harness.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		l, err := h.cp.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		left = left[:0]
		for _, p := range l.Items {
			left = append(left, p.Name)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		h.t.Fatalf("pods in %s never all gone: %v (left %v)", namespace, err, left)
	}
}

// waitCgroupsGone waits (a minute at most) for the kubelet to remove the
// deleted GPU pods' cgroups, with the device rules in them; what is left is
// counted by leftovers.
func (h *helmNode) waitCgroupsGone(ctx context.Context) {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_ = harness.WaitFor(wctx, 200*time.Millisecond, func() (bool, error) { return len(h.podCgroups()) == 0, nil })
}
