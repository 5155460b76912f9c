//go:build nodee2e

package nodee2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
		n.t.Fatalf("the CUDA program in %s never counted %d GPUs: %v; it said:\n%s", p.Name, want, err, n.logLines(p, "cuda"))
	}
	return seen
}

// logLines returns the container's log lines whose message starts with
// prefix (gs-devcount's "cuda" and "cuda-error" reports).
func (n *node) logLines(p *corev1.Pod, prefix string) string {
	var out []string
	for _, l := range strings.Split(n.podLog(p), "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// freshCount runs a new CUDA process in the running container (ctr task
// exec, with the container's own environment) and returns its GPU count.
//
// The process writes its report, and whatever the driver or the library
// prints, to a file in the container, read back through /proc/<pid>/root:
// the output stream of `ctr task exec` is not reliable. Once the exec'd
// process has exited, containerd's client deletes it and closes its own FIFO
// readers before its copy goroutines have necessarily drained them, so under
// load a short process's output is sometimes lost: exit status 0, nothing
// printed (4 of 1,500 execs on this 2-core VM with both CPUs busy, while the
// report file held the right count every time). The exit status is reliable
// and is checked too; a failure prints the report, ctr's output and what the
// container sees.
func (n *node) freshCount(p *corev1.Pod) int {
	n.execs++
	report := fmt.Sprintf("/tmp/gs-devcount-%d.out", n.execs)
	out, err := n.execReport(p, report, "/gs/gs-devcount", "--once", "--out", report)
	v, cerr := strconv.Atoi(strings.TrimPrefix(out, "cuda-once "))
	if err != nil || cerr != nil || !strings.HasPrefix(out, "cuda-once ") {
		_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
		pid, _ := n.initPid(id)
		n.t.Fatalf("a new CUDA process in %s (gs-devcount --once): %v; report %s: %q\n%s", p.Name, err, report, out, n.containerState(p, pid))
	}
	return v
}

// execReport runs argv as a new process in the pod's running container
// (ctr task exec, with the container's own environment) and returns what it
// wrote to report, a file in the container read back through
// /proc/<pid>/root: the output stream of `ctr task exec` is not reliable.
func (n *node) execReport(p *corev1.Pod, report string, argv ...string) (string, error) {
	return n.execReportIn(p, p.Status.ContainerStatuses[0].Name, report, argv...)
}

// execReportIn is execReport in the pod's container named container.
func (n *node) execReportIn(p *corev1.Pod, container, report string, argv ...string) (string, error) {
	var id string
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container {
			_, id, _ = strings.Cut(cs.ContainerID, "://")
		}
	}
	n.execs++
	start := time.Now()
	cmd := exec.Command("ctr", append([]string{"--address", n.ctrSock, "-n", "k8s.io", "task", "exec", "--exec-id",
		fmt.Sprintf("exec-%d", n.execs), id}, argv...)...)
	ctrOut, err := cmd.CombinedOutput()
	took := time.Since(start)
	pid, perr := n.initPid(id)
	var got []byte
	if perr == nil {
		got, perr = os.ReadFile(fmt.Sprintf("/proc/%d/root%s", pid, report))
	}
	out := strings.TrimSpace(string(got))
	if err != nil || perr != nil {
		return out, fmt.Errorf("exec %v (%v): %s (ctr said %q); report: %w", argv, took.Round(time.Millisecond), exitStatus(err), ctrOut, perr)
	}
	return out, nil
}

// exitStatus describes how a command ended.
func exitStatus(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit status 0"
	case errors.As(err, &ee):
		return ee.ProcessState.String()
	default:
		return err.Error()
	}
}

// initPid returns the host pid of the container's first process (from the
// runtime's task state).
func (n *node) initPid(id string) (int, error) {
	b, err := os.ReadFile(filepath.Join(n.stateDir, "io.containerd.runtime.v2.task", "k8s.io", id, "init.pid"))
	if err != nil {
		return 0, fmt.Errorf("container %s: %w", id, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// containerState describes what the container sees now, for failure
// messages: the probe's last report, the GPU nodes in its /dev, the agent's
// applied report, and the agent's log.
func (n *node) containerState(p *corev1.Pod, pid int) string {
	var nodes []string
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/root/dev", pid)); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "nvidia") {
				nodes = append(nodes, e.Name())
			}
		}
	}
	cur, err := n.cp.Client.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{})
	appliedNow := ""
	if err == nil {
		appliedNow = cur.Annotations[api.AnnotationApplied]
	}
	return fmt.Sprintf("probe sees %v; container /dev: %v; %s: %s (%v)\nCUDA program said:\n%s\nagent log:\n%s",
		n.current(p), nodes, api.AnnotationApplied, appliedNow, err, n.logLines(p, "cuda"), n.agentTail())
}

// memoryTotal is the GPU memory a new CUDA process in the pod sees.
func (n *node) memoryTotal(p *corev1.Pod) int64 {
	return n.memoryTotalIn(p, p.Status.ContainerStatuses[0].Name)
}

// memoryTotalIn is memoryTotal in the pod's container named container.
func (n *node) memoryTotalIn(p *corev1.Pod, container string) int64 {
	n.execs++
	report := fmt.Sprintf("/tmp/gs-nvmlprocs-%d.out", n.execs)
	out, err := n.execReportIn(p, container, report, "/bin/sh", "-c", "exec /gs/gs-nvmlprocs >"+report+" 2>&1")
	var rep struct {
		Total int64 `json:"total"`
	}
	if err == nil {
		err = jsonUnmarshal(out, &rep)
	}
	if err != nil {
		n.t.Fatalf("gs-nvmlprocs in %s: %v; it wrote %q\nagent log:\n%s", p.Name, err, out, n.agentTail())
	}
	return rep.Total
}
