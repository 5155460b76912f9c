//go:build nodee2e

package nodee2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// draPreemptScheduler is gpuslice-scheduler's profile beside the stock
// kube-scheduler of the DRA node (a second scheduler).
const draPreemptScheduler = "gpuslice"

// TestDRAPreempt (make e2e-dra-preempt): the preemption step of TestDRA
// (testDRAPreempt) alone, on a node of its own.
func TestDRAPreempt(t *testing.T) {
	ctx, n, ok := privateDRANode(t, "TestDRAPreempt")
	if !ok {
		return
	}
	defer n.stop()
	var r draResult
	testDRAPreempt(t, ctx, n, &r)
}

// testDRAPreempt (TestDRA's first step, make e2e-dra): on the DRA node
// (real kubelet, containerd with CDI, runc, the resource claim controller),
// gpuslice-scheduler as a second scheduler. GPU 0 is full with two
// priority-0 shares of 50 units (1 GiB each), busy; GPUs 1-3 are held whole
// by priority-0 pods (each pinned to its GPU: the stock allocator gives a
// claim the first device that fits, so an unpinned whole-GPU claim that
// came first took GPU 0 and the shares pinned there never fitted). A
// priority-1000 pod asks for 50 units and 2 GiB of GPU 0: one share is
// preempted, its claim's group goes from the node, and the preemptor runs
// with its claim's 2 GiB as the GPU's memory and half of GPU 0's granted
// time beside the share that stayed. Every pod of the step is deleted and
// its claim gone from the node before the next step.
func testDRAPreempt(t *testing.T, ctx context.Context, n *node, r *draResult) {
	sp, err := n.cp.StartScheduler(ctx, filepath.Join(n.bin, "gpuslice-scheduler"), "gpuslice-scheduler",
		harness.SchedulerOptions{SchedulerName: draPreemptScheduler, GPUSlice: true, Args: "{heartbeatTimeout: 1h}"})
	if err != nil {
		t.Fatal(err)
	}
	n.procs = append(n.procs, sp)
	for _, prio := range []int32{0, 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: priorityClassName(prio)}, Value: prio}
		if _, err := n.cp.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n.claimTemplate(ctx, "lo50", 50, 1<<30, 0, "")
	n.claimTemplate(ctx, "hi50", 50, 2<<30, 0, "")
	var pods []string
	var claims []*resourceapi.ResourceClaim
	defer func() { n.removePods(ctx, pods, claims) }()
	var lo []*corev1.Pod
	for _, name := range []string{"lo-0", "lo-1"} {
		p := preemptPod(steadyDemand(draPod(name, "lo50", busyTenant()...)), 0)
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5) // the kubelet stops it before the API object goes
		lo = append(lo, n.createPod(ctx, p))
		pods = append(pods, name)
	}
	for i := 1; i < numGPUs; i++ {
		tpl := fmt.Sprintf("whole-%d", i)
		n.createTemplate(ctx, tpl, wholeGPUClaim(i))
		n.createPod(ctx, preemptPod(draPod(tpl, tpl, "sleep", "3600"), 0))
		pods = append(pods, tpl)
	}
	for _, name := range pods {
		p := n.waitPod(bounded(ctx), name, "running", running)
		claims = append(claims, n.allocated(ctx, p))
	}
	loClaims := map[string]*resourceapi.ResourceClaim{"lo-0": claims[0], "lo-1": claims[1]}
	start := time.Now()
	hi := n.createPod(ctx, preemptPod(steadyDemand(draPod("hi", "hi50", busyTenant()...)), 1000))
	pods = append(pods, hi.Name)
	hi = n.waitPod(bounded(ctx), hi.Name, "running", running)
	t.Logf("e2e dra preempt: the priority-1000 pod runs %v after its creation", time.Since(start).Round(time.Millisecond))
	hiClaim := n.allocated(ctx, hi)
	claims = append(claims, hiClaim)
	if d := allocatedDevice(hiClaim); d != "gpu-0" {
		t.Fatalf("the preemptor's claim got %q, want gpu-0", d)
	}
	victim, stayed := n.preempted(ctx, lo)
	n.waitUnprepared(bounded(ctx), loClaims[victim])
	n.checkMemory(hi, 2<<30, r)
	other := n.waitPod(bounded(ctx), stayed, "running", running)
	res := n.shares(bounded(ctx), []*corev1.Pod{hi, other}, shareWindow)
	n.checkShares("dra preempt 50/50", []float64{50, 50}, res)
	t.Logf("e2e dra preempt: victim %s's group gone; granted %.1f%% / %.1f%%, memory limit held", victim, res.held[0], res.held[1])
}

// wholeGPUClaim asks for the whole GPU of index gpu.
func wholeGPUClaim(gpu int) resourceapi.ResourceClaimSpec {
	spec := harness.DRAClaimSpec(harness.GPURequest{GPUs: 1})
	spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf("device.attributes[%q].index == %d", harness.DRADriver, gpu)}}}
	return spec
}

// preempted checks that exactly one of the two shares lo was preempted
// (gone, or going: the kubelet stops it) and the whole-GPU pods all stayed;
// it returns the victim and the share that stayed.
func (n *node) preempted(ctx context.Context, lo []*corev1.Pod) (victim, stayed string) {
	for _, p := range lo {
		cur, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || err == nil && cur.DeletionTimestamp != nil:
			victim = p.Name
		case err == nil:
			stayed = p.Name
		default:
			n.t.Fatal(err)
		}
	}
	if victim == "" || stayed == "" {
		n.t.Fatalf("want exactly one of lo-0, lo-1 preempted; gone %q, stayed %q", victim, stayed)
	}
	for i := 1; i < numGPUs; i++ {
		name := fmt.Sprintf("whole-%d", i)
		if _, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			n.t.Fatalf("whole-GPU pod %s: %v (only a share of GPU 0 may go)", name, err)
		}
	}
	return victim, stayed
}

// removePods deletes the named pods (those still there) and waits until
// their claims are gone from the node, so the next step finds every GPU free.
func (n *node) removePods(ctx context.Context, names []string, claims []*resourceapi.ResourceClaim) {
	var left []string
	for _, name := range names {
		if _, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			left = append(left, name)
		}
	}
	if len(left) > 0 {
		n.deletePods(ctx, left...)
	}
	for _, c := range claims {
		n.waitUnprepared(bounded(ctx), c)
	}
}

// preemptPod puts p on gpuslice-scheduler with priority prio.
func preemptPod(p *corev1.Pod, prio int32) *corev1.Pod {
	p.Spec.SchedulerName = draPreemptScheduler
	p.Spec.PriorityClassName, p.Spec.Priority = priorityClassName(prio), ptr.To(prio)
	return p
}

func priorityClassName(prio int32) string { return fmt.Sprintf("e2e-dra-preempt-%d", prio) }
