//go:build nodee2e

package nodee2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// Measurement windows: the shares are asserted over these (cumulative
// granted and busy time at both ends), not per wall-clock window.
const (
	shareWindow   = 6 * time.Second
	latencyCount  = 10 // online requests measured alone and beside offline pods
	stepTimeout   = 90 * time.Second
	podMemory     = 1 << 30
	unfitMemory   = 20 << 30 // more than any simulated GPU (16 GiB)
	drainedUnits  = 10
	unfitUnits    = 50
	sharesSummary = "GPUSLICE_E2E_SUMMARY"
)

// TestPodShares: pods asking for units of one GPU on the real kubelet, placed
// by gpuslice-scheduler, get their shares from the time-slice daemon; a live change
// of units is applied on the node; a pod that does not fit and a pod on a
// Draining node stay Pending with the reason; an online pod beside three
// offline ones. Ends with "pod shares 25/75: <a>% / <b>%, change 25->50
// enforced in <ms> ms" (make e2e-pod-shares).
func TestPodShares(t *testing.T) {
	ctx, n, ok := privateNode(t, "TestPodShares")
	if !ok {
		return
	}
	defer n.stop()
	n.checkBooks(ctx)
	var busy []float64
	var change time.Duration
	shared := t.Run("shares", func(t *testing.T) { n.t = t; busy, change = testPodShares(t, ctx, n) })
	t.Run("identity", func(t *testing.T) { n.t = t; testIdentity(t, ctx, n) })
	t.Run("unfit", func(t *testing.T) { n.t = t; testUnfit(t, ctx, n) })
	t.Run("draining", func(t *testing.T) { n.t = t; testDraining(t, ctx, n) })
	t.Run("no-escape", func(t *testing.T) { n.t = t; testNoEscape(t, ctx, n) })
	t.Run("not-ready-gpus", func(t *testing.T) { n.t = t; testNotReady(t, ctx, n) })
	t.Run("preempted", func(t *testing.T) { n.t = t; testPreempted(t, ctx, n) })
	t.Run("online", func(t *testing.T) { n.t = t; testOnline(t, ctx, n) })
	t.Run("slots", func(t *testing.T) { n.t = t; testSlots(t, ctx, n) })
	t.Run("burst", func(t *testing.T) { n.t = t; testBurst(t, ctx, n) })
	t.Run("context", func(t *testing.T) { n.t = t; testContextMemory(t, ctx, n) }) // last: the agent is left with contexts taking memory
	n.t = t
	if !shared || len(busy) < 2 { // it has said why (or was not run); no figures then
		return
	}
	line := fmt.Sprintf("pod shares 25/75: %.1f%% / %.1f%%, change 25->50 enforced in %d ms", busy[0], busy[1], change.Milliseconds())
	fmt.Println(line)
	if path := os.Getenv(sharesSummary); path != "" {
		if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// bounded is ctx limited to one step's time.
func bounded(ctx context.Context) context.Context {
	c, cancel := context.WithTimeout(ctx, stepTimeout)
	go func() { <-c.Done(); cancel() }()
	return c
}

// checkBooks: the kubelet's view of the node's share capacity is the
// scheduler's: the units of the GPUNode row as device-plugin slots, and as
// many gpuslice.io/gpu slots per GPU as the scheduler places containers on
// one GPU.
func (n *node) checkBooks(ctx context.Context) {
	row := n.waitRow(ctx, "published", time.Time{}, func(g *v1alpha2.GPUNode) bool { return len(g.Status.GPUs) == numGPUs })
	n.waitUnitsOffered(ctx, row.Status.Summary.UnitsTotal)
	units := row.Status.Summary.UnitsTotal
	node, err := n.cp.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	slots := node.Status.Allocatable[api.ResourceGPU]
	if slots.Value() != numGPUs*api.MaxContainersPerGPU {
		n.t.Fatalf("the kubelet offers %d %s slots, the scheduler places up to %d containers on each of %d GPUs", slots.Value(), api.ResourceGPU, api.MaxContainersPerGPU, numGPUs)
	}
	n.t.Logf("e2e books: the kubelet offers %d %s and %d %s slots on %d GPUs, as the scheduler books them", units, api.ResourceUnits, slots.Value(), api.ResourceGPU, numGPUs)
}

// testPodShares: 25 and 75 units on one GPU, both busy: shares of the granted
// time within 5 points, their work past their grants within the gate's
// queue bound (checkShares). Then 25 -> 50
// while the GPU is full is refused with an Event (nothing changes on the
// node), 75 -> 50 shrinks, and 25 -> 50 is applied on the running group
// (timed: patch to the group's new share on the node), both then at 50/50.
func testPodShares(t *testing.T, ctx context.Context, n *node) ([]float64, time.Duration) {
	big := n.createPod(ctx, steadyDemand(sharePod("big", 75, podMemory, "", busyTenant()...)))
	big = n.waitPod(bounded(ctx), big.Name, "running", running)
	// The other GPUs are lost while the second pod is placed, so that it
	// goes beside the first (placement also weighs measured utilization).
	lost := n.loseOthers(ctx, n.minors(assignment(big), "main"))
	small := n.createPod(ctx, steadyDemand(sharePod("small", 25, podMemory, "", busyTenant()...)))
	small = n.waitPod(bounded(ctx), small.Name, "running", running)
	n.findAgain(ctx, lost)
	pods := []*corev1.Pod{small, big}
	if a, b := n.minors(assignment(small), "main"), n.minors(assignment(big), "main"); len(a) != 1 || !slices.Equal(a, b) {
		t.Fatalf("share pods on GPUs %v and %v, want one GPU (the only healthy one)", a, b)
	}
	if s, b := n.waitShare(bounded(ctx), small, 0.25), n.waitShare(bounded(ctx), big, 0.75); s.IsZero() || b.IsZero() {
		t.Fatal("no shares")
	}
	r := n.shares(bounded(ctx), pods, shareWindow)
	t.Logf("e2e shares 25/75: granted %.1f%% / %.1f%%, simulated GPU busy %.1f%% / %.1f%%, work past the grants %.1f%% / %.1f%% of the window (bound %v / %v), tenants waited for a CPU %.1f points",
		r.held[0], r.held[1], r.busy[0], r.busy[1], r.overPct[0], r.overPct[1], time.Duration(r.overBound[0]), time.Duration(r.overBound[1]), r.starved)
	n.checkShares("25/75", []float64{25, 75}, r)

	// The GPU is full: 25 -> 50 is refused, all or nothing.
	n.setUnits(ctx, small.Name, 50)
	note := n.waitEvent(ctx, small.Name, api.ReasonShareRefused)
	t.Logf("e2e event %s: %s", api.ReasonShareRefused, note)
	if v := n.share(small); v != 0.25 {
		t.Fatalf("after a refused change the group's share is %.2f, want 0.25", v)
	}
	n.setUnits(ctx, small.Name, 25) // withdrawn
	n.setUnits(ctx, big.Name, 50)
	n.waitShare(bounded(ctx), big, 0.5)
	// The books must have freed the 25 units before the next change is asked.
	n.waitPod(bounded(ctx), big.Name, "booked at 50 units", func(p *corev1.Pod) bool {
		a := assignment(p)
		return a != nil && len(a.Containers) == 1 && len(a.Containers[0].GPUs) == 1 && a.Containers[0].GPUs[0].Units == 50
	})
	t0 := n.setUnits(ctx, small.Name, 50)
	applied := n.waitShare(bounded(ctx), small, 0.5)
	change := applied.Sub(t0)
	t.Logf("e2e change 25 -> 50: the group's share on the node changed %v after the annotation", change.Round(time.Millisecond))
	note = n.waitEvent(ctx, small.Name, api.ReasonShareResized)
	t.Logf("e2e event %s: %s", api.ReasonShareResized, note)
	n.waitDaemonShare(bounded(ctx), pods, 0.5)
	r2 := n.shares(bounded(ctx), pods, shareWindow)
	t.Logf("e2e shares 50/50 after the change: granted %.1f%% / %.1f%%, simulated GPU busy %.1f%% / %.1f%%, work past the grants %.1f%% / %.1f%% of the window (bound %v / %v), tenants waited for a CPU %.1f points",
		r2.held[0], r2.held[1], r2.busy[0], r2.busy[1], r2.overPct[0], r2.overPct[1], time.Duration(r2.overBound[0]), time.Duration(r2.overBound[1]), r2.starved)
	n.checkShares("50/50 after the change", []float64{50, 50}, r2)
	return r.busy, change
}

// waitDaemonShare waits until the time-slice daemon schedules every pod's group
// with share want (its status, refreshed every 250 ms).
func (n *node) waitDaemonShare(ctx context.Context, pods []*corev1.Pod, want float64) {
	var last string
	err := waitFor(ctx, func() bool {
		groups, err := n.daemonGroups()
		if err != nil {
			last = err.Error()
			return false
		}
		b, _ := json.Marshal(groups)
		last = string(b)
		for _, p := range pods {
			if g := groups[groupOf(p)]; g.Share < want-1e-9 || g.Share > want+1e-9 {
				return false
			}
		}
		return true
	})
	if err != nil {
		n.t.Fatalf("the node daemon never scheduled the groups at share %.2f: %v\nstatus: %s", want, err, last)
	}
}

// testIdentity: a container's process started without GPUSLICE_GROUP_FILE
// is a member of its container's group all the same (the agent bound the
// group to the container's cgroup: the daemon goes by the kernel's word), not
// a group of its own with turns of its own. The container cannot write its
// group's binding (the group directory is read-only in it, if there at all).
func testIdentity(t *testing.T, ctx context.Context, n *node) {
	p := n.createPod(ctx, sharePod("noenv", 25, podMemory, "", "/bin/sh", "-c",
		"for d in "+filepath.Join(n.runDir(), "groups", "k8s-noenv-main-*")+`; do if echo / >"$d/cgroup"; then echo binding written; else echo binding refused; fi; done; `+
			"unset GPUSLICE_GROUP_FILE; exec "+strings.Join(busyTenant(), " ")))
	p = n.waitPod(bounded(ctx), p.Name, "running", running)
	defer n.deletePods(bounded(ctx), p.Name)
	var last string
	err := waitFor(bounded(ctx), func() bool {
		groups, err := n.daemonGroups()
		if err != nil {
			last = err.Error()
			return false
		}
		b, _ := json.Marshal(groups)
		last = string(b)
		for name := range groups {
			if strings.HasPrefix(name, "pid-") {
				return false
			}
		}
		g := groups[groupOf(p)]
		return g.Members >= 1 && g.Grants > 0
	})
	bound, _ := os.ReadFile(filepath.Join(n.runDir(), "groups", groupOf(p), group.FileCgroup))
	if err != nil {
		t.Fatalf("a process without GPUSLICE_GROUP_FILE is not a member of its container's group %s (binding %q): %v\nstatus: %s",
			groupOf(p), strings.TrimSpace(string(bound)), err, last)
	}
	t.Logf("e2e identity: a process without GPUSLICE_GROUP_FILE is a member of group %s, bound to cgroup %s",
		groupOf(p), strings.TrimSpace(string(bound)))
	if err := waitFor(bounded(ctx), func() bool { return strings.Contains(n.podLog(p), "binding ") }); err != nil {
		t.Fatalf("the pod never said whether it could write its binding: %v\n%s", err, n.podLog(p))
	}
	if l := n.podLog(p); strings.Contains(l, "binding written") || !strings.Contains(l, "binding refused") {
		t.Fatalf("the container wrote its group's cgroup binding:\n%s", l)
	} else {
		t.Logf("e2e identity: the container writing its binding: %s", strings.ReplaceAll(l, "\n", " | "))
	}
}

// testUnfit: a pod that fits no GPU (more memory than a GPU has) stays
// Pending, and the scheduler says why.
func testUnfit(t *testing.T, ctx context.Context, n *node) {
	p := n.createPod(ctx, sharePod("unfit", unfitUnits, unfitMemory, "", busyTenant()...))
	msg := n.pending(bounded(ctx), p.Name)
	t.Logf("e2e unfit pod: %s", msg)
	want := fmt.Sprintf("needs 1 GPUs with %d units and %d bytes free", unfitUnits, int64(unfitMemory))
	if !strings.Contains(msg, want) {
		t.Errorf("unschedulable message %q does not say %q", msg, want)
	}
	n.deletePods(bounded(ctx), p.Name)
}

// testDraining: with the GPUNode annotated to drain, the agent publishes the
// node Draining; a new pod that would fit stays Pending, saying so, while
// the pods already there keep running.
func testDraining(t *testing.T, ctx context.Context, n *node) {
	setDrain := func(v any) time.Time {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{api.AnnotationDrain: v}}})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		if _, err := n.cp.GPUNodes.GpusliceV1alpha2().GPUNodes().Patch(ctx, nodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		return at
	}
	at := setDrain("true")
	n.waitRow(bounded(ctx), "Draining", at, func(g *v1alpha2.GPUNode) bool { return g.Status.State == v1alpha2.NodeDraining })
	p := n.createPod(ctx, sharePod("drained", drainedUnits, podMemory, "", busyTenant()...))
	msg := n.pending(bounded(ctx), p.Name)
	t.Logf("e2e pod on a draining node: %s", msg)
	if want := fmt.Sprintf("node %s is %s", nodeName, v1alpha2.NodeDraining); !strings.Contains(msg, want) {
		t.Errorf("unschedulable message %q does not say %q", msg, want)
	}
	for _, name := range []string{"small", "big"} {
		if cur, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil || cur.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s on the draining node: %v (%v), want it still running", name, cur.Status.Phase, err)
		}
	}
	n.deletePods(bounded(ctx), p.Name)
	at = setDrain(nil)
	n.waitRow(bounded(ctx), "Working again", at, func(g *v1alpha2.GPUNode) bool { return g.Status.State == v1alpha2.NodeWorking })
}

// testNotReady: every GPU but the full one (the share pods') made lost on
// the simulated GPU (NVML queries fail with GPU_IS_LOST, as after XID 79):
// the agent publishes them Unhealthy, and a pod that would fit on any of
// them stays Pending; once they are found again it is placed on one.
func testNotReady(t *testing.T, ctx context.Context, n *node) {
	big, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, "big", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	full := n.minors(assignment(big), "main")
	lost := n.loseOthers(ctx, full)
	defer n.findAgain(ctx, lost)
	p := n.createPod(ctx, sharePod("not-ready", drainedUnits, podMemory, "", busyTenant()...))
	msg := n.pending(bounded(ctx), p.Name)
	t.Logf("e2e pod with only unhealthy GPUs free: %s", msg)
	if want := fmt.Sprintf("needs 1 GPUs with %d units and %d bytes free, 0 have (%d unhealthy", drainedUnits, podMemory, len(lost)); !strings.Contains(msg, want) {
		t.Errorf("unschedulable message %q does not say %q", msg, want)
	}
	n.findAgain(ctx, lost)
	p = n.waitPod(bounded(ctx), p.Name, "running once the GPUs are healthy", running)
	if got := n.minors(assignment(p), "main"); len(got) != 1 || slices.Contains(full, got[0]) {
		t.Errorf("pod placed on GPUs %v, the full GPU is %v", got, full)
	}
	n.deletePods(bounded(ctx), p.Name)
}

// setLost runs gpuslice-sim-ctl verb (lost, found) on the GPUs of indices
// idx and returns when it began.
func (n *node) setLost(verb string, idx []string) time.Time {
	at := time.Now()
	for _, i := range idx {
		n.simCtl(verb, i)
	}
	return at
}

// findAgain makes the GPUs of indices idx found again on the simulated GPU
// and returns once the agent publishes every GPU Healthy and the kubelet
// offers their units again (the device plugin's healthy slots): a later
// step that places pods on them is not refused by the kubelet's admission
// while they are still counted lost. It is idempotent: a GPU found twice
// stays found.
func (n *node) findAgain(ctx context.Context, idx []string) {
	at := n.setLost("found", idx)
	row := n.waitRow(bounded(ctx), "GPUs found", at, func(g *v1alpha2.GPUNode) bool { return healthy(g) == numGPUs })
	n.waitUnitsOffered(bounded(ctx), row.Status.Summary.UnitsTotal)
}

// waitUnitsOffered waits until the kubelet's allocatable gpuslice.io/gpu-units
// of the node is want.
func (n *node) waitUnitsOffered(ctx context.Context, want int64) {
	var units int64
	err := waitFor(ctx, func() bool {
		node, err := n.cp.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		q := node.Status.Allocatable[api.ResourceUnits]
		units = q.Value()
		return units == want
	})
	if err != nil {
		n.t.Fatalf("the kubelet offers %d %s, the GPUNode row has %d: %v", units, api.ResourceUnits, want, err)
	}
}

// healthy counts the Healthy GPUs of a row.
func healthy(g *v1alpha2.GPUNode) int {
	c := 0
	for _, gpu := range g.Status.GPUs {
		if gpu.Health == v1alpha2.GPUHealthy {
			c++
		}
	}
	return c
}

// loseOthers makes every GPU whose minor is not in keep lost on the
// simulated GPU, waits until the agent publishes them Unhealthy, and returns
// their indices.
func (n *node) loseOthers(ctx context.Context, keep []int) []string {
	var lost []string
	for _, g := range n.gpus {
		if !slices.Contains(keep, g.Minor) {
			lost = append(lost, strconv.Itoa(g.Index))
		}
	}
	at := n.setLost("lost", lost)
	row := n.waitRow(bounded(ctx), "GPUs lost", at, func(g *v1alpha2.GPUNode) bool { return healthy(g) == numGPUs-len(lost) })
	for _, g := range row.Status.GPUs {
		if g.Health != v1alpha2.GPUHealthy {
			n.t.Logf("e2e GPU %d %s: %s", g.Index, g.Health, g.HealthMessage)
		}
	}
	return lost
}

// testOnline: an online pod (priority high, 25 units) whose requests need
// 60 kernels of 500 µs, alone and then beside three busy offline pods (25
// units, priority low) on its GPU. Its latencies are figures, not asserts:
// they depend on the machine's load.
func testOnline(t *testing.T, ctx context.Context, n *node) {
	n.deletePods(bounded(ctx), "small", "big")
	online := n.createPod(ctx, sharePod("online", 25, podMemory, api.PriorityHigh, "/gs/gs-tenant", "--mode", "requests",
		"--kernel-us", "500", "--n", "60", "--gap-ms", "200", "--jitter-ms", "100", "--seconds", "3600"))
	online = n.waitPod(bounded(ctx), online.Name, "running", running)
	alone := n.latencies(bounded(ctx), online, time.Time{}, latencyCount)
	pods := []*corev1.Pod{online}
	// The offline pods go beside it: the other GPUs are lost meanwhile
	// (placement also weighs measured utilization).
	lost := n.loseOthers(ctx, n.minors(assignment(online), "main"))
	defer n.findAgain(ctx, lost)
	for i := range 3 {
		p := n.createPod(ctx, sharePod(fmt.Sprintf("offline-%d", i), 25, podMemory, api.PriorityLow, busyTenant()...))
		pods = append(pods, n.waitPod(bounded(ctx), p.Name, "running", running))
	}
	for _, p := range pods[1:] {
		if a, b := n.minors(assignment(p), "main"), n.minors(assignment(online), "main"); !slices.Equal(a, b) {
			t.Fatalf("offline pod %s on GPUs %v, the online pod on %v: want one GPU (the only healthy one)", p.Name, a, b)
		}
	}
	n.waitBusy(bounded(ctx), pods[1:])
	since := time.Now()
	beside := n.latencies(bounded(ctx), online, since, latencyCount)
	a50, a99 := percentiles(alone)
	b50, b99 := percentiles(beside)
	t.Logf("e2e online pod (priority high, requests of 60 x 500 us kernels): alone p50 %v max %v, beside 3 busy offline pods p50 %v max %v (%d requests each): %.2fx alone at p50",
		a50.Round(10*time.Microsecond), a99.Round(10*time.Microsecond), b50.Round(10*time.Microsecond), b99.Round(10*time.Microsecond),
		len(alone), float64(b50)/float64(a50))
}

// latencies waits for count request latencies ("lat <ns>") the online pod
// printed after since, skipping the first one after since (a group's bank
// starts empty, and the request may have begun before since).
func (n *node) latencies(ctx context.Context, p *corev1.Pod, since time.Time, count int) []time.Duration {
	var out []time.Duration
	err := waitFor(ctx, func() bool {
		out = out[:0]
		skipped := false
		for _, e := range n.logEntries(p) {
			var ns int64
			if c, _ := fmt.Sscanf(e.msg, "lat %d", &ns); c != 1 || e.at.Before(since) {
				continue
			}
			if !skipped {
				skipped = true
				continue
			}
			out = append(out, time.Duration(ns))
		}
		return len(out) >= count
	})
	if err != nil {
		n.t.Fatalf("pod %s printed %d request latencies, want %d: %v\n%s", p.Name, len(out), count, err, n.podLog(p))
	}
	return out[:count]
}

// percentiles returns the median and the largest of d.
func percentiles(d []time.Duration) (time.Duration, time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}

// slotPods is one more share pod on a GPU than the 16 device-plugin slots a
// GPU once had (the 17th failed the kubelet's admission).
const slotPods = 17

// testSlots: memory-only share pods (gpuslice.io/gpu: 1 and memory, the
// gpuslice.io/gpu device plugin) placed on one GPU (the others lost) beyond
// 16 are all admitted by the kubelet and run, as many as the scheduler
// booked there.
func testSlots(t *testing.T, ctx context.Context, n *node) {
	online, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, "online", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Only the online pod's GPU is left to place them on.
	lost := n.loseOthers(ctx, n.minors(assignment(online), "main"))
	defer n.findAgain(ctx, lost)
	var names []string
	for i := range slotPods {
		p := sharePod(fmt.Sprintf("slot-%d", i), 0, 256<<20, "", "/bin/sleep", "3600")
		delete(p.Spec.Containers[0].Resources.Limits, api.ResourceUnits)
		p.Spec.Containers[0].Resources.Limits[api.ResourceGPU] = *resource.NewQuantity(1, resource.DecimalSI)
		names = append(names, n.createPod(ctx, p).Name)
	}
	perGPU := map[int]int{}
	for _, name := range names {
		p := n.waitPod(bounded(ctx), name, "running", func(p *corev1.Pod) bool {
			if p.Status.Phase == corev1.PodFailed {
				t.Fatalf("share pod %s failed: %s %s", p.Name, p.Status.Reason, p.Status.Message)
			}
			return running(p)
		})
		for _, m := range n.minors(assignment(p), "main") {
			perGPU[m]++
		}
	}
	l, err := n.cp.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	most, on := 0, -1
	for m, c := range perGPU {
		if c > most {
			most, on = c, m
		}
	}
	booked := 0
	for _, p := range l.Items {
		if a := assignment(&p); a != nil && slices.Contains(n.minors(a, "main"), on) {
			booked++
		}
	}
	t.Logf("e2e slots: %d memory-only share pods running, %d on GPU %d; the scheduler booked %d share containers there (per GPU %v)", len(names), most, on, booked, perGPU)
	if most < slotPods {
		t.Errorf("only %d of the %d share pods on one GPU (%v), the only healthy one", most, slotPods, perGPU)
	}
}
