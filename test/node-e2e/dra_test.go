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
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/dra/taints"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/pkg/api"
	drav1 "github.com/gpuslice/gpuslice/pkg/apis/dra/v1alpha1"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

const (
	draSummary = "GPUSLICE_E2E_SUMMARY"
	// draPluginDir is the driver's directory on the node (its socket and
	// checkpoint), inside the test's private /var/lib.
	draPluginDir  = "/var/lib/kubelet/plugins/gpuslice.io"
	draCheckpoint = draPluginDir + "/checkpoint.json"
)

// draResult collects what the subtests measured for the summary line.
type draResult struct {
	shares      []float64 // busy-time shares of the 25 and 75 unit pods
	held, tried int       // containers that saw exactly their claim's memory
}

// TestDRA: gpuslice-node's DRA driver on the real kubelet (containerd 1.7 with
// CDI, runc), placed by the stock kube-scheduler, claims made from
// ResourceClaimTemplates by kube-controller-manager (make e2e-dra); first,
// gpuslice-scheduler's preemption for a claim (testDRAPreempt). Ends with
// "dra shares 25/75: <a>% / <b>%, memory limits held <n>/<n>, prepare p99 <ms> ms".
func TestDRA(t *testing.T) {
	ctx, n, ok := privateDRANode(t, "TestDRA")
	if !ok {
		return
	}
	defer n.stop()
	var r draResult
	t.Run("preempt", func(t *testing.T) { n.t = t; testDRAPreempt(t, ctx, n, &r) })
	shared := t.Run("shares", func(t *testing.T) { n.t = t; testDRAShares(t, ctx, n, &r) })
	t.Run("live-change", func(t *testing.T) { n.t = t; testDRALiveChange(t, ctx, n) })
	t.Run("unfit", func(t *testing.T) { n.t = t; testDRAUnfit(t, ctx, n) })
	t.Run("claim-shapes", func(t *testing.T) { n.t = t; testDRAShapes(t, ctx, n) })
	t.Run("crash-steps", func(t *testing.T) { n.t = t; testDRACrashSteps(t, ctx, n) })
	t.Run("tainted", func(t *testing.T) { n.t = t; testDRATainted(t, ctx, n) })
	t.Run("agent-restart", func(t *testing.T) { n.t = t; testDRAAgentRestart(t, ctx, n, &r) })
	t.Run("extended-resource", func(t *testing.T) { n.t = t; testDRAExtendedResource(t, ctx, n, &r) })
	t.Run("bad-config", func(t *testing.T) { n.t = t; testDRABadConfig(t, ctx, n) })
	t.Run("rbac", func(t *testing.T) { n.t = t; testDRARBAC(t, n) })
	n.t = t
	if !shared {
		return
	}
	times := n.prepareTimes()
	if len(times) == 0 {
		t.Fatalf("the agent logged no prepared claim (\"DRA claim prepared\" with its duration)\nagent log:\n%s", n.agentTail())
	}
	t.Logf("e2e dra: %d Prepare calls, %v .. %v", len(times), times[0], times[len(times)-1])
	line := fmt.Sprintf("dra shares 25/75: %.1f%% / %.1f%%, memory limits held %d/%d, prepare p99 %d ms",
		r.shares[0], r.shares[1], r.held, r.tried, p99(times).Milliseconds())
	fmt.Println(line)
	if path := os.Getenv(draSummary); path != "" {
		if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// checkMemory: a new CUDA process in the pod sees exactly want bytes of GPU
// memory (its claim's memory, or the whole GPU's).
func (n *node) checkMemory(p *corev1.Pod, want int64, r *draResult) {
	got := n.memoryTotal(p)
	r.tried++
	if got != want {
		n.t.Errorf("pod %s: a CUDA process sees %d bytes of GPU memory, want its claim's %d", p.Name, got, want)
		return
	}
	r.held++
}

// testDRAShares: two pods from templates of 25 and 75 units (1 and 2 GiB) on
// GPU 0, both busy: shares of the granted time within 5 points and work past
// the grants within the gate's queue bound (checkShares),
// each container's memory exactly its claim's.
func testDRAShares(t *testing.T, ctx context.Context, n *node, r *draResult) {
	n.claimTemplate(ctx, "q25", 25, 1<<30, 0, "")
	n.claimTemplate(ctx, "q75", 75, 2<<30, 0, "")
	small := n.createPod(ctx, steadyDemand(draPod("s25", "q25", busyTenant()...)))
	big := n.createPod(ctx, steadyDemand(draPod("s75", "q75", busyTenant()...)))
	small = n.waitPod(bounded(ctx), small.Name, "running", running)
	big = n.waitPod(bounded(ctx), big.Name, "running", running)
	for _, p := range []*corev1.Pod{small, big} {
		c := n.claimOf(ctx, p)
		if d := allocatedDevice(c); d != "gpu-0" {
			t.Fatalf("pod %s's claim got device %q, want gpu-0", p.Name, d)
		}
	}
	res := n.shares(bounded(ctx), []*corev1.Pod{small, big}, shareWindow)
	n.checkShares("dra shares", []float64{25, 75}, res)
	r.shares = res.busy
	t.Logf("e2e dra shares: granted %.1f%% / %.1f%%, busy %.1f%% / %.1f%%, work past the grants %.1f%% / %.1f%% of the window (bound %v / %v), starved %.1f points",
		res.held[0], res.held[1], res.busy[0], res.busy[1], res.overPct[0], res.overPct[1], time.Duration(res.overBound[0]), time.Duration(res.overBound[1]), res.starved)
	n.checkMemory(small, 1<<30, r)
	n.checkMemory(big, 2<<30, r)
}

// testDRAUnfit: 50 more units of the full GPU 0: Pending, with the scheduler's reason.
func testDRAUnfit(t *testing.T, ctx context.Context, n *node) {
	n.claimTemplate(ctx, "q50", 50, 1<<30, 0, "")
	p := n.createPod(ctx, draPod("unfit", "q50", "/bin/busybox", "sleep", "3600"))
	msg := n.pendingForClaims(bounded(ctx), p.Name)
	t.Logf("e2e dra unfit: %q", msg)
	n.deletePods(ctx, p.Name)
}

// testDRATainted: GPU 1 falls off the bus as on a real driver (its NVML
// measurements fail with GPU_IS_LOST, XID 79 is reported), which taints its
// device in the ResourceSlice and turns the device status of a claim prepared
// on it before from Healthy to Unhealthy (the agent's server-side apply of
// the claim's status); a claim only it could satisfy stays Pending,
// and the same claim tolerating the taint is given gpu-1 (so the taint, not
// the selector, kept the first one out).
func testDRATainted(t *testing.T, ctx context.Context, n *node) {
	victim := n.gpus[1]
	// A claim prepared on gpu-1 while it is healthy (tolerating taints, so
	// that it stays allocated): its device status turns Unhealthy once the
	// GPU is tainted, written by the agent through the API server.
	spec := draClaim(10, 1<<30, 1, "")
	spec.Devices.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{{Operator: resourceapi.DeviceTolerationOpExists}}
	n.createTemplate(ctx, "on1-tolerating", spec)
	held := n.waitPod(bounded(ctx), n.createPod(ctx, draPod("held-on-1", "on1-tolerating", "/bin/busybox", "sleep", "3600")).Name,
		"running", running)
	hc := n.claimOf(ctx, held)
	n.waitDeviceHealth(bounded(ctx), hc.Name, drav1.HealthHealthy)
	t0 := time.Now()
	n.simCtl("lost", strconv.Itoa(victim.Index))
	n.simCtl("xid", victim.UUID, "79")
	taints := n.waitTainted(bounded(ctx), "gpu-1")
	t.Logf("e2e dra tainted: gpu-1 tainted in the ResourceSlice %v after XID 79: %+v", time.Since(t0).Round(time.Millisecond), taints)
	n.waitDeviceHealth(bounded(ctx), hc.Name, drav1.HealthUnhealthy)
	t.Logf("e2e dra tainted: the device status of claim %s (prepared on gpu-1 before) says Unhealthy %v after XID 79",
		hc.Name, time.Since(t0).Round(time.Millisecond))
	n.deletePods(ctx, held.Name)
	n.waitUnprepared(bounded(ctx), hc)
	n.claimTemplate(ctx, "on1", 10, 1<<30, 1, "")
	p := n.createPod(ctx, draPod("on-tainted", "on1", "/bin/busybox", "sleep", "3600"))
	msg := n.pendingForClaims(bounded(ctx), p.Name)
	t.Logf("e2e dra tainted: a claim for gpu-1 only: %q", msg)
	n.deletePods(ctx, p.Name)

	p = n.createPod(ctx, draPod("on-tainted-tolerating", "on1-tolerating", "/bin/busybox", "sleep", "3600"))
	c := n.allocated(bounded(ctx), p)
	if d := allocatedDevice(c); d != "gpu-1" {
		t.Errorf("a claim for gpu-1 tolerating its taints got %q, want gpu-1", d)
	}
	// Deleted once the kubelet is done with its Prepare: deleted before, the
	// claim could be prepared after waitUnprepared saw nothing on the node,
	// and left there for the next subtest to find.
	n.waitPod(bounded(ctx), p.Name, "running, or told its Prepare failed", func(cur *corev1.Pod) bool {
		return running(cur) || n.podEvent(ctx, cur.Name, "FailedPrepareDynamicResources") != ""
	})
	n.deletePods(ctx, p.Name)
	n.waitUnprepared(bounded(ctx), c)
}

// waitDeviceHealth waits until the claim's (one) device status, written by
// the agent, says health.
func (n *node) waitDeviceHealth(ctx context.Context, claim, health string) {
	var seen string
	err := harness.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		c, err := n.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(c.Status.Devices) != 1 || c.Status.Devices[0].Data == nil {
			seen = fmt.Sprintf("%d device statuses", len(c.Status.Devices))
			return false, nil
		}
		var st drav1.DeviceStatus
		if err := json.Unmarshal(c.Status.Devices[0].Data.Raw, &st); err != nil {
			return false, err
		}
		seen = string(c.Status.Devices[0].Data.Raw)
		return st.Health == health, nil
	})
	if err != nil {
		n.t.Fatalf("claim %s's device status never said %s (last: %s): %v\nagent log:\n%s", claim, health, seen, err, n.agentTail())
	}
}

// testDRAAgentRestart: the agent is SIGKILLed as soon as the claim's CDI
// spec is written (Prepare done or nearly, the container not yet started).
// While it is down, either the pod starts (the kubelet had Prepare's answer)
// or the kubelet reports the failed Prepare; then the agent comes back, the
// pod runs (without a container restart if it ran already), and every claim
// is prepared once: one group, CDI spec and checkpoint entry per claim, the
// container holding its memory limit. Before that, XID 48 on gpu-0 (full,
// still answering NVML): the restarted agent cannot see that XID again, and
// keeps its taint from the XID record (internal/health/xidrecord).
func testDRAAgentRestart(t *testing.T, ctx context.Context, n *node, r *draResult) {
	n.simCtl("xid", n.gpus[0].UUID, "48")
	n.waitSlice(bounded(ctx), "gpu-0 tainted xid-48", func(devs []resourceapi.Device) bool { return hasXID48(devs) })
	before := n.cdiSpecs()
	n.claimTemplate(ctx, "r10", 10, 1<<30, 2, "")
	p := n.createPod(ctx, draPod("restart", "r10", "/bin/busybox", "sleep", "3600"))
	err := harness.WaitFor(bounded(ctx), time.Millisecond, func() (bool, error) { return len(n.cdiSpecs()) > len(before), nil })
	if err != nil {
		t.Fatalf("no CDI spec written for the claim: %v\nagent log:\n%s", err, n.agentTail())
	}
	n.killAgent()
	var runningBefore *corev1.Pod
	var failed string
	n.waitPod(bounded(ctx), p.Name, "running, or told its Prepare failed, while the agent is down", func(cur *corev1.Pod) bool {
		if running(cur) {
			runningBefore = cur
			return true
		}
		failed = n.podEvent(ctx, cur.Name, "FailedPrepareDynamicResources")
		return failed != ""
	})
	if runningBefore != nil {
		t.Logf("e2e dra restart: agent killed right after Prepare wrote the CDI spec; the pod started while it was down")
	} else {
		t.Logf("e2e dra restart: agent killed right after Prepare wrote the CDI spec; the kubelet: %s", failed)
	}
	served := n.servings() // earlier subtests restarted it too
	n.startAgent()
	n.waitAgentServing(bounded(ctx), served+1)
	p = n.waitPod(bounded(ctx), p.Name, "running", running)
	// The lost GPU does not come back with the agent: it is withdrawn from
	// the ResourceSlice, so the next test's plain pod cannot get it.
	n.waitSlice(bounded(ctx), "withdrew the lost gpu-1, gpu-0 still tainted xid-48", func(devs []resourceapi.Device) bool {
		return len(devs) == numGPUs-1 && !slices.ContainsFunc(devs, func(d resourceapi.Device) bool { return d.Name == "gpu-1" }) && hasXID48(devs)
	})
	if c := allocatedDevice(n.claimOf(ctx, p)); c != "gpu-2" {
		t.Errorf("the claim for gpu-2 got %q", c)
	}
	if runningBefore != nil && containerID(p) != containerID(runningBefore) {
		t.Errorf("pod %s's container changed across the agent restart: %s -> %s", p.Name, containerID(runningBefore), containerID(p))
	}
	n.checkOnce(ctx, []string{"s25", "s75", "restart"})
	n.checkMemory(p, 1<<30, r)
}

// hasXID48 tells whether gpu-0 carries the NoSchedule taint of XID 48.
func hasXID48(devs []resourceapi.Device) bool {
	return slices.ContainsFunc(devs, func(d resourceapi.Device) bool {
		return d.Name == "gpu-0" && slices.ContainsFunc(d.Taints, func(tn resourceapi.DeviceTaint) bool {
			return tn.Key == taints.KeyUnhealthy && tn.Value == "xid-48" && tn.Effect == resourceapi.DeviceTaintEffectNoSchedule
		})
	})
}

// containerID is the pod's first container's ID ("" before it started).
func containerID(p *corev1.Pod) string {
	if len(p.Status.ContainerStatuses) == 0 {
		return ""
	}
	return p.Status.ContainerStatuses[0].ContainerID
}

// podEvent returns "reason: message" of an event of the pod whose reason
// or message contains what ("" if none).
func (n *node) podEvent(ctx context.Context, pod, what string) string {
	l, err := n.cp.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		return ""
	}
	for _, e := range l.Items {
		if strings.Contains(e.Reason, what) || strings.Contains(e.Message, what) {
			return e.Reason + ": " + e.Message
		}
	}
	return ""
}

// checkOnce: the node holds exactly one group and one CDI spec per claim of
// the named running pods, and no other, once the kubelet has unprepared the
// claims of pods deleted before (it retries an Unprepare that found the
// agent down: waited for up to a minute, so a claim left behind for good
// still fails).
func (n *node) checkOnce(ctx context.Context, pods []string) {
	want := map[string]bool{}
	for _, name := range pods {
		p, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			n.t.Fatal(err)
		}
		want[string(n.claimOf(ctx, p).UID)] = true
	}
	var problems []string
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_ = harness.WaitFor(wctx, 200*time.Millisecond, func() (bool, error) {
		problems = n.onceProblems(want)
		return len(problems) == 0, nil
	})
	for _, p := range problems {
		n.t.Error(p)
	}
}

// onceProblems lists how the node's groups, CDI specs and checkpoint
// entries differ from one per claim of want.
func (n *node) onceProblems(want map[string]bool) []string {
	var groups, specs []string
	ents, _ := os.ReadDir(filepath.Join(n.runDir(), "groups"))
	for _, e := range ents {
		if uid, ok := strings.CutPrefix(e.Name(), "dra-"); ok {
			groups = append(groups, uid)
		}
	}
	for _, s := range n.cdiSpecs() {
		specs = append(specs, strings.TrimSuffix(strings.TrimPrefix(s, harness.DRADriver+"-claim_"), ".json"))
	}
	cp, err := checkpoint.Load(draCheckpoint)
	if err != nil {
		return []string{fmt.Sprintf("the driver's checkpoint: %v", err)}
	}
	var saved []string
	for uid := range cp.Claims {
		saved = append(saved, uid)
	}
	var out []string
	for what, got := range map[string][]string{"groups": groups, "CDI specs": specs, "checkpoint entries": saved} {
		seen := map[string]int{}
		for _, uid := range got {
			seen[uid]++
		}
		for uid := range want {
			if seen[uid] != 1 {
				out = append(out, fmt.Sprintf("claim %s has %d %s on the node, want 1 (all: %v)", uid, seen[uid], what, got))
			}
		}
		for uid := range seen {
			if !want[uid] {
				out = append(out, fmt.Sprintf("%s for claim %s, which no running pod holds (all: %v)", what, uid, got))
			}
		}
	}
	return out
}

// testDRAExtendedResource: a plain pod asking for gpuslice.io/gpu (no claim,
// no scheduler name) gets the one whole free GPU (gpu-3) through the
// DeviceClass mapping, and sees all of its memory.
func testDRAExtendedResource(t *testing.T, ctx context.Context, n *node, r *draResult) {
	zero := int64(0)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}, Spec: corev1.PodSpec{
		HostNetwork: true, TerminationGracePeriodSeconds: &zero, RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "main", Image: image, ImagePullPolicy: corev1.PullNever, Command: []string{"/bin/busybox", "sleep", "3600"},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{api.ResourceGPU: *resource.NewQuantity(1, resource.DecimalSI)}}}}}}
	p = n.createPod(ctx, p)
	p = n.waitPod(bounded(ctx), p.Name, "running", running)
	c := n.claimOf(ctx, p)
	if p.Status.ExtendedResourceClaimStatus == nil {
		t.Fatalf("pod %s runs without the scheduler's extended resource claim", p.Name)
	}
	if d := allocatedDevice(c); d != "gpu-3" {
		t.Fatalf("the gpuslice.io/gpu pod got %q, want the only whole free GPU gpu-3", d)
	}
	units := c.Status.Allocation.Devices.Results[0].ConsumedCapacity[harness.DRAUnits]
	if units.Value() != api.DefaultUnitsPerGPU {
		t.Errorf("the gpuslice.io/gpu claim consumes %d units, want the whole GPU's %d", units.Value(), api.DefaultUnitsPerGPU)
	}
	n.checkMemory(p, int64(n.gpus[3].MemoryTotal), r)
}

// testDRABadConfig: a claim whose GPUShareConfig has shareCeiling 500 is
// refused at Prepare with an event naming the field; nothing is applied (no
// group, CDI spec or checkpoint entry of the claim, the pod not running).
func testDRABadConfig(t *testing.T, ctx context.Context, n *node) {
	n.claimTemplate(ctx, "bad", 10, 1<<30, 2, `{"apiVersion":"gpuslice.io/v1alpha1","kind":"GPUShareConfig","shareCeiling":500}`)
	p := n.createPod(ctx, draPod("bad", "bad", "/bin/busybox", "sleep", "3600"))
	var msg string
	err := harness.WaitFor(bounded(ctx), 100*time.Millisecond, func() (bool, error) {
		msg = n.podEvent(ctx, p.Name, "shareCeiling")
		return msg != "", nil
	})
	if err != nil {
		t.Fatalf("no event naming shareCeiling for pod %s: %v\nagent log:\n%s", p.Name, err, n.agentTail())
	}
	t.Logf("e2e dra bad config: %s", msg)
	c := n.claimOf(ctx, p)
	if group, spec, saved := n.claimOnNode(string(c.UID)); group || spec || saved {
		t.Errorf("a refused claim left group %v, CDI spec %v, checkpoint entry %v", group, spec, saved)
	}
	cur, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Status.Phase == corev1.PodRunning {
		t.Errorf("pod %s with a bad claim config is running", p.Name)
	}
	n.deletePods(ctx, p.Name)
}

// testDRALiveChange: the annotation gpuslice.io/share-config on the running
// 25-unit pod's claim makes its group high priority with a 40% share
// ceiling, without restarting the pod; a bad one is a Warning event on the
// claim naming the field, and changes nothing.
func testDRALiveChange(t *testing.T, ctx context.Context, n *node) {
	p, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, "s25", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := n.claimOf(ctx, p)
	mgr := groupmgr.New(groupmgr.Config{RunDir: n.runDir()})
	group := n.claimGroup(p)
	annotate := func(raw string) time.Time {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{drav1.ShareConfigAnnotation: raw}}})
		t0 := time.Now()
		if _, err := n.cp.Client.ResourceV1().ResourceClaims(ns).Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		return t0
	}
	t0 := annotate(`{"apiVersion":"gpuslice.io/v1alpha1","kind":"GPUShareConfig","priority":"high","shareCeiling":40}`)
	var got groupmgr.Resources
	err = harness.WaitFor(bounded(ctx), 10*time.Millisecond, func() (bool, error) {
		got, err = mgr.Get(group)
		return err == nil && got.Settings.Priority.String() == "high" && got.Settings.ShareMax == 0.4, nil
	})
	if err != nil {
		t.Fatalf("group %s after the annotation: %+v (%v)\nagent log:\n%s", group, got.Settings, err, n.agentTail())
	}
	took := time.Since(t0)
	if got.Settings.Share != 0.25 || got.Settings.MemoryMax != 1<<30 {
		t.Errorf("the live change moved the claim's share or memory: %+v", got.Settings)
	}
	t.Logf("e2e dra live change: priority high, share ceiling 40%% in the group %v after the annotation", took.Round(time.Millisecond))
	annotate(`{"apiVersion":"gpuslice.io/v1alpha1","kind":"GPUShareConfig","shareCeiling":0}`)
	var msg string
	err = harness.WaitFor(bounded(ctx), 100*time.Millisecond, func() (bool, error) {
		l, err := n.cp.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + c.Name})
		if err != nil {
			return false, nil
		}
		for _, e := range l.Items {
			if e.Reason == "InvalidShareConfig" && strings.Contains(e.Message, "shareCeiling") {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no InvalidShareConfig event naming shareCeiling on claim %s: %v\nagent log:\n%s", c.Name, err, n.agentTail())
	}
	if now, err := mgr.Get(group); err != nil || now.Settings != got.Settings {
		t.Errorf("a refused change changed the group: %+v (%v), was %+v", now.Settings, err, got.Settings)
	}
	t.Logf("e2e dra live change refused: %s", msg)
	cur, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil || cur.UID != p.UID || restarts(cur) != restarts(p) {
		t.Errorf("pod %s restarted or replaced by the live change (%v)", p.Name, err)
	}
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}
