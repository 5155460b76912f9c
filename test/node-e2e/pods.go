//go:build nodee2e

package nodee2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

const ns = "e2e"

// gpuPod is a hostNetwork pod of the e2e image asking for gpus (whole GPUs,
// or a share when memory > 0).
func gpuPod(name string, gpus int64, memory int64, want string, command ...string) *corev1.Pod {
	limits := corev1.ResourceList{api.ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)}
	if memory > 0 {
		limits[api.ResourceMemory] = *resource.NewQuantity(memory, resource.BinarySI)
		limits[api.ResourceUnits] = *resource.NewQuantity(50, resource.DecimalSI)
	}
	zero := int64(0)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			SchedulerName: scheduler, HostNetwork: true, TerminationGracePeriodSeconds: &zero,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: image, ImagePullPolicy: corev1.PullNever, Command: command,
				Resources: corev1.ResourceRequirements{Limits: limits}}},
		},
	}
	if want != "" {
		p.Annotations = map[string]string{api.AnnotationGPUs: want}
	}
	return p
}

func (n *node) createPod(ctx context.Context, p *corev1.Pod) *corev1.Pod {
	got, err := n.cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return got
}

// waitPod waits until cond holds for the pod.
func (n *node) waitPod(ctx context.Context, name string, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	var last *corev1.Pod
	err := harness.WaitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		p, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		n.t.Fatalf("pod %s never %s: %v\nstatus: %+v\nannotations: %v\nagent log:\n%s", name, what, err, last.Status, last.Annotations, n.agentTail())
	}
	return last
}

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

func (n *node) agentTail() string {
	b, _ := os.ReadFile(n.agentLog)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func assignment(p *corev1.Pod) *api.Assignment {
	a, err := api.ParseAssignment(p.Annotations[api.AnnotationAssignment])
	if err != nil {
		return nil
	}
	return a
}

// minors lists the device minors of the container's assigned GPUs.
func (n *node) minors(a *api.Assignment, container string) []int {
	var out []int
	for _, c := range a.Containers {
		if c.Name != container {
			continue
		}
		for _, g := range c.GPUs {
			for _, d := range n.gpus {
				if d.UUID == g.UUID {
					out = append(out, d.Minor)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func (n *node) setWant(ctx context.Context, name, want string) time.Time {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.AnnotationGPUs: want}}})
	t0 := time.Now()
	if _, err := n.cp.Client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		n.t.Fatal(err)
	}
	return t0
}

// probeLine is one report of gs-devprobe: when, and which minors were usable.
type probeLine struct {
	at     time.Time
	minors []int
}

// probeLines reads the probe's output from the container log (CRI format:
// "<time> stdout F <line>").
func (n *node) probeLines(p *corev1.Pod) []probeLine {
	path := filepath.Join(n.podLogs, fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), "main", "0.log")
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []probeLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 6 {
			continue
		}
		ns, err := strconv.ParseInt(fields[3], 10, 64)
		if err != nil {
			continue
		}
		l := probeLine{at: time.Unix(0, ns)}
		if fields[5] != "-" {
			for _, m := range strings.Split(fields[5], ",") {
				v, _ := strconv.Atoi(m)
				l.minors = append(l.minors, v)
			}
		}
		out = append(out, l)
	}
	return out
}

// waitUsable waits until the probe inside the pod reports exactly minors
// usable, at or after since, and returns when it saw that.
func (n *node) waitUsable(ctx context.Context, p *corev1.Pod, minors []int, since time.Time) time.Time {
	var seen time.Time
	var last []probeLine
	err := harness.WaitFor(ctx, 2*time.Millisecond, func() (bool, error) {
		last = n.probeLines(p)
		for _, l := range last {
			if !l.at.Before(since) && slices.Equal(l.minors, minors) {
				seen = l.at
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		n.t.Fatalf("pod %s never saw GPUs %v: %v; probe said %v\nagent log:\n%s", p.Name, minors, err, last, n.agentTail())
	}
	return seen
}

// current returns what the probe reports now.
func (n *node) current(p *corev1.Pod) []int {
	l := n.probeLines(p)
	if len(l) == 0 {
		return nil
	}
	return l[len(l)-1].minors
}

func applied(p *corev1.Pod) (*api.Applied, bool) {
	a, err := api.ParseApplied(p.Annotations[api.AnnotationApplied])
	return a, err == nil
}

// cudaLines reads gs-devcount's reports ("cuda <ns> <count>") from the log.
func (n *node) cudaLines(p *corev1.Pod) []probeLine {
	path := filepath.Join(n.podLogs, fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), "main", "0.log")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []probeLine
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 6 || f[3] != "cuda" {
			continue
		}
		ns, err1 := strconv.ParseInt(f[4], 10, 64)
		count, err2 := strconv.Atoi(f[5])
		if err1 == nil && err2 == nil {
			out = append(out, probeLine{at: time.Unix(0, ns), minors: make([]int, count)})
		}
	}
	return out
}

// waitCUDA waits until the running CUDA program in the pod counts want GPUs
// (at or after since) and returns when it did.
func (n *node) waitCUDA(ctx context.Context, p *corev1.Pod, want int, since time.Time) time.Time {
	var seen time.Time
	err := harness.WaitFor(ctx, 2*time.Millisecond, func() (bool, error) {
		for _, l := range n.cudaLines(p) {
			if !l.at.Before(since) && len(l.minors) == want {
				seen = l.at
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		n.t.Fatalf("the CUDA program in %s never counted %d GPUs: %v (said %d times)", p.Name, want, err, len(n.cudaLines(p)))
	}
	return seen
}

// freshCount runs a new CUDA process in the running container (ctr task
// exec, with the container's own environment) and returns its GPU count.
func (n *node) freshCount(p *corev1.Pod) int {
	_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	n.execs++
	out := run(n.t, "ctr", "--address", n.ctrSock, "-n", "k8s.io", "task", "exec", "--exec-id", fmt.Sprintf("count-%d", n.execs), id, "/gs/gs-devcount", "--once")
	v, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "cuda-once")))
	if err != nil {
		n.t.Fatalf("gs-devcount --once said %q", out)
	}
	return v
}
