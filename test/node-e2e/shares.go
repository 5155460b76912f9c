//go:build nodee2e

package nodee2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// sharePod is a pod asking for units of one GPU (and memory), as docs/pods.md
// writes it: binpack placement, priority "high" or "low" ("" for none).
func sharePod(name string, units, memory int64, priority string, command ...string) *corev1.Pod {
	zero := int64(0)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{api.AnnotationPlacement: string(api.PlacementBinpack)}},
		Spec: corev1.PodSpec{
			SchedulerName: scheduler, HostNetwork: true, TerminationGracePeriodSeconds: &zero,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: image, ImagePullPolicy: corev1.PullNever, Command: command,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					api.ResourceUnits:  *resource.NewQuantity(units, resource.DecimalSI),
					api.ResourceMemory: *resource.NewQuantity(memory, resource.BinarySI),
				}}}},
		},
	}
	if priority != "" {
		p.Annotations[api.AnnotationPriority] = priority
	}
	return p
}

// busyTenant runs busy kernels back to back (gs-tenant, never synchronizing)
// until the pod is deleted.
func busyTenant() []string {
	return []string{"/gs/gs-tenant", "--mode", "busy", "--kernel-us", "500", "--seconds", "3600"}
}

// groupOf is the time-slice group of a pod's container "main".
func groupOf(p *corev1.Pod) string {
	return deviceplugin.GroupName(deviceplugin.Candidate{Name: p.Name, Container: "main", UID: p.UID})
}

// groupName is the time-slice group of the pod on this node: its device
// plugin group (groupOf), or where the node sets groupFor (DRA: one group
// per claim), that.
func (n *node) groupName(p *corev1.Pod) string {
	if n.groupFor != nil {
		return n.groupFor(p)
	}
	return groupOf(p)
}

func (n *node) runDir() string { return filepath.Join(n.dir, "run") }

// share reads the share the group of p is set to on the node (its group's
// share file), or -1 when it has none or it cannot be read.
func (n *node) share(p *corev1.Pod) float64 {
	b, err := os.ReadFile(filepath.Join(n.runDir(), "groups", groupOf(p), group.FileShare))
	if err != nil {
		return -1
	}
	v, err := group.ParseShare(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return v
}

// setUnits patches the pod's live-change annotation (gpuslice.io/units).
func (n *node) setUnits(ctx context.Context, name string, units int) time.Time {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.AnnotationUnits: strconv.Itoa(units)}}})
	if err != nil {
		n.t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := n.cp.Client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		n.t.Fatal(err)
	}
	return t0
}

// waitShare polls the group's share file every millisecond until it reads
// want, and returns when it did.
func (n *node) waitShare(ctx context.Context, p *corev1.Pod, want float64) time.Time {
	var seen time.Time
	err := harness.WaitFor(ctx, time.Millisecond, func() (bool, error) {
		if v := n.share(p); v > want-1e-9 && v < want+1e-9 {
			seen = time.Now()
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		n.t.Fatalf("group of %s never set to share %.2f (now %.2f): %v\nagent log:\n%s", p.Name, want, n.share(p), err, n.agentTail())
	}
	return seen
}

// daemonGroups returns the time-slice daemon's status of every group (summed over
// GPUs: each pod here uses one).
func (n *node) daemonGroups() (map[string]timeslice.GroupGPUStatus, error) {
	st, err := timeslice.ReadStatus(n.runDir())
	if err != nil {
		return nil, err
	}
	out := map[string]timeslice.GroupGPUStatus{}
	for _, g := range st.GPUs {
		for _, e := range g.Groups {
			cur := out[e.Group]
			e.AchievedNs += cur.AchievedNs
			out[e.Group] = e
		}
	}
	return out, nil
}

// simBusy returns the simulated GPU's busy time per host pid (kernels run,
// summed over devices), read from its state file by gs-simbusy.
func (n *node) simBusy() (map[int]int64, error) {
	out, err := exec.Command(filepath.Join(n.dir, "gs-simbusy"), os.Getenv("GPUSLICE_SIM_STATE")).Output()
	if err != nil {
		return nil, fmt.Errorf("gs-simbusy: %w", err)
	}
	busy := map[int]int64{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var pid, dev int
		var ns int64
		if c, _ := fmt.Sscanf(l, "proc %d %d %d", &pid, &dev, &ns); c == 3 {
			busy[pid] += ns
		}
	}
	return busy, nil
}

// podOfPid returns the UID of the pod whose cgroup holds host pid (the
// kubelet's cgroup paths name the pod's UID).
func podOfPid(pid int, pods []*corev1.Pod) (types.UID, bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, p := range pods {
			if strings.Contains(sc.Text(), "pod"+string(p.UID)) {
				return p.UID, true
			}
		}
	}
	return "", false
}

// shareSample is, per pod (in the order given), the time the time-slice daemon
// granted its group and the busy time of its processes on the simulated GPU,
// both cumulative, and the time each thread of those processes waited for a
// CPU (the kernel's schedstat run delay, by tid, cumulative).
type shareSample struct {
	held, busy []int64
	waited     []map[int]int64
}

func (n *node) sampleShares(pods []*corev1.Pod) (shareSample, error) {
	s := shareSample{held: make([]int64, len(pods)), busy: make([]int64, len(pods)), waited: make([]map[int]int64, len(pods))}
	for i := range pods {
		s.waited[i] = map[int]int64{}
	}
	groups, err := n.daemonGroups()
	if err != nil {
		return s, err
	}
	for i, p := range pods {
		s.held[i] = groups[n.groupName(p)].AchievedNs
	}
	busy, err := n.simBusy()
	if err != nil {
		return s, err
	}
	for pid, ns := range busy {
		uid, ok := podOfPid(pid, pods)
		if !ok {
			continue
		}
		for i, p := range pods {
			if p.UID == uid {
				s.busy[i] += ns
				harness.RunDelays(pid, s.waited[i])
			}
		}
	}
	return s, nil
}

// waitBusy waits until every pod's group has been granted time and its
// processes have run kernels on the simulated GPU, and returns that sample.
func (n *node) waitBusy(ctx context.Context, pods []*corev1.Pod) shareSample {
	var last shareSample
	var lastErr error
	err := harness.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		last, lastErr = n.sampleShares(pods)
		if lastErr != nil {
			return false, nil
		}
		for i := range pods {
			if last.held[i] == 0 || last.busy[i] == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		n.t.Fatalf("pods never all busy on the GPU: %v (last sample %+v, %v)\nagent log:\n%s", err, last, lastErr, n.agentTail())
	}
	return last
}

// shareResult is what each pod got over a window: its share (percent) of
// the granted time and of the simulated GPU's busy time, and how far (percent
// of the window) its kernels ran beyond the time it was granted.
type shareResult struct {
	held, busy, over []float64
	// starved is the most any one thread of the pods' processes waited for
	// a CPU over the window, summed over pods, in points of the busy time:
	// granted time a tenant could not use because the machine gave it no
	// CPU, which moves the busy-time shares by at most that much.
	starved float64
}

// shares measures for d each pod's shares of the granted time and of the
// simulated GPU's busy time between two samples.
func (n *node) shares(ctx context.Context, pods []*corev1.Pod, d time.Duration) shareResult {
	s0 := n.waitBusy(ctx, pods)
	start := time.Now()
	select {
	case <-ctx.Done():
		n.t.Fatal(ctx.Err())
	case <-time.After(d):
	}
	s1, err := n.sampleShares(pods)
	if err != nil {
		n.t.Fatal(err)
	}
	window := time.Since(start)
	pct := func(a, b []int64) []float64 {
		var sum int64
		for i := range a {
			sum += b[i] - a[i]
		}
		out := make([]float64, len(a))
		for i := range a {
			if sum > 0 {
				out[i] = 100 * float64(b[i]-a[i]) / float64(sum)
			}
		}
		return out
	}
	over := make([]float64, len(pods))
	for i := range pods {
		over[i] = 100 * float64((s1.busy[i]-s0.busy[i])-(s1.held[i]-s0.held[i])) / float64(window.Nanoseconds())
	}
	n.t.Logf("e2e pod shares over %v: granted ns %v -> %v, simulated GPU busy ns %v -> %v", window, s0.held, s1.held, s0.busy, s1.busy)
	var starvedNs, busyNs int64
	for i := range pods {
		busyNs += s1.busy[i] - s0.busy[i]
		var most int64
		for tid, w := range s1.waited[i] {
			most = max(most, w-s0.waited[i][tid])
		}
		starvedNs += most
	}
	r := shareResult{held: pct(s0.held, s1.held), busy: pct(s0.busy, s1.busy), over: over}
	if busyNs > 0 {
		r.starved = 100 * float64(starvedNs) / float64(busyNs)
	}
	return r
}

// checkShares fails unless every pod's share of the granted time and of the
// simulated GPU's busy time is within 5 points of want plus the CPU
// starvation measured over the window (r.starved, about 0 on an idle
// machine), and no pod's kernels ran on the simulated GPU for more than 5 %
// of the window beyond the time it was granted (the work a tenant leaves
// queued past its slice is bounded). The starvation term: a tenant whose
// thread waits for a CPU asks late or leaves its granted time unused, and the
// daemon, work-conserving, lends that time to the tenant that has work; both
// shares then move by at most the time it waited, with no fault in the
// enforcement.
func (n *node) checkShares(what string, want []float64, r shareResult) {
	for i := range want {
		if abs(r.held[i]-want[i]) > 5+r.starved {
			n.t.Errorf("%s: pod %d got %.1f%% of the granted time, want %.0f%% +- 5 (+ %.1f points its tenants waited for a CPU)", what, i, r.held[i], want[i], r.starved)
		}
		if r.over[i] > 5 {
			n.t.Errorf("%s: pod %d ran on the simulated GPU %.1f%% of the window beyond its granted time, want <= 5%%", what, i, r.over[i])
		}
		if abs(r.busy[i]-want[i]) > 5+r.starved {
			n.t.Errorf("%s: pod %d got %.1f%% of the simulated GPU's busy time, want %.0f%% +- 5 (+ %.1f points its tenants waited for a CPU)", what, i, r.busy[i], want[i], r.starved)
		}
	}
}

func abs(x float64) float64 { return max(x, -x) }

// logEntry is one line of a container's CRI log: when, and the message.
type logEntry struct {
	at  time.Time
	msg string
}

func (n *node) logEntries(p *corev1.Pod) []logEntry {
	b, err := os.ReadFile(filepath.Join(n.podLogs, fmt.Sprintf("%s_%s_%s", ns, p.Name, p.UID), "main", "0.log"))
	if err != nil {
		return nil
	}
	var out []logEntry
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, " ", 4)
		if len(f) != 4 {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, f[0])
		if err == nil {
			out = append(out, logEntry{at, f[3]})
		}
	}
	return out
}

// pending waits until the pod is reported unschedulable and returns the
// scheduler's message; the pod must still be unbound.
func (n *node) pending(ctx context.Context, name string) string {
	var msg string
	n.waitPod(ctx, name, "reported unschedulable", func(p *corev1.Pod) bool {
		if p.Spec.NodeName != "" {
			n.t.Fatalf("pod %s was bound to %s, want it Pending", name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				msg = c.Message
				return true
			}
		}
		return false
	})
	return msg
}

func (n *node) deletePods(ctx context.Context, names ...string) {
	zero := int64(0)
	for _, name := range names {
		if err := n.cp.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			n.t.Fatal(err)
		}
	}
	if err := harness.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		for _, name := range names {
			if _, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		n.t.Fatalf("pods %v never gone: %v", names, err)
	}
}
