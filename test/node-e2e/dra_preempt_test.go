//go:build nodee2e

package nodee2e

import (
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

// TestDRAPreempt (make e2e-dra): on the DRA node (real kubelet, containerd
// with CDI, runc, the resource claim controller), gpuslice-scheduler as a
// second scheduler. GPU 0 is full with two priority-0 shares of 50 units
// (1 GiB each), busy; GPUs 1-3 are held whole by priority-0 pods. A
// priority-1000 pod asks for 50 units and 2 GiB of GPU 0: one share is
// preempted, its claim's group goes from the node, and the preemptor runs
// with its claim's 2 GiB as the GPU's memory and half of GPU 0's granted
// time beside the share that stayed.
func TestDRAPreempt(t *testing.T) {
	ctx, n, ok := privateDRANode(t, "TestDRAPreempt")
	if !ok {
		return
	}
	defer n.stop()
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
	n.createTemplate(ctx, "whole", harness.DRAClaimSpec(harness.GPURequest{GPUs: 1}))
	var lo []*corev1.Pod
	for _, name := range []string{"lo-0", "lo-1"} {
		p := preemptPod(steadyDemand(draPod(name, "lo50", busyTenant()...)), 0)
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5) // the kubelet stops it before the API object goes
		lo = append(lo, n.createPod(ctx, p))
	}
	for i := range 3 {
		n.createPod(ctx, preemptPod(draPod(fmt.Sprintf("whole-%d", i+1), "whole", "sleep", "3600"), 0))
	}
	for _, name := range []string{"lo-0", "lo-1", "whole-1", "whole-2", "whole-3"} {
		n.waitPod(bounded(ctx), name, "running", running)
	}
	loClaims := map[string]*resourceapi.ResourceClaim{}
	for _, p := range lo {
		loClaims[p.Name] = n.allocated(ctx, p)
	}
	start := time.Now()
	hi := n.createPod(ctx, preemptPod(steadyDemand(draPod("hi", "hi50", busyTenant()...)), 1000))
	hi = n.waitPod(bounded(ctx), hi.Name, "running", running)
	t.Logf("e2e dra preempt: the priority-1000 pod runs %v after its creation", time.Since(start).Round(time.Millisecond))
	if c := n.allocated(ctx, hi); allocatedDevice(c) != "gpu-0" {
		t.Fatalf("the preemptor's claim got %q, want gpu-0", allocatedDevice(c))
	}
	var victim, stayed string
	for name := range loClaims {
		p, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil:
			victim = name // gone, or going (the kubelet stops it)
		case err == nil:
			stayed = name
		default:
			t.Fatal(err)
		}
	}
	if victim == "" || stayed == "" {
		t.Fatalf("want exactly one of lo-0, lo-1 preempted; gone %q, stayed %q", victim, stayed)
	}
	for _, name := range []string{"whole-1", "whole-2", "whole-3"} {
		if _, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("whole-GPU pod %s: %v (only a share of GPU 0 may go)", name, err)
		}
	}
	n.waitUnprepared(bounded(ctx), loClaims[victim])
	var r draResult
	n.checkMemory(hi, 2<<30, &r)
	other := n.waitPod(bounded(ctx), stayed, "running", running)
	res := n.shares(bounded(ctx), []*corev1.Pod{hi, other}, shareWindow)
	n.checkShares("dra preempt 50/50", []float64{50, 50}, res)
	t.Logf("e2e dra preempt: victim %s's group gone; granted %.1f%% / %.1f%%, memory limit held %d/%d",
		victim, res.held[0], res.held[1], r.held, r.tried)
}

// preemptPod puts p on gpuslice-scheduler with priority prio.
func preemptPod(p *corev1.Pod, prio int32) *corev1.Pod {
	p.Spec.SchedulerName = draPreemptScheduler
	p.Spec.PriorityClassName, p.Spec.Priority = priorityClassName(prio), ptr.To(prio)
	return p
}

func priorityClassName(prio int32) string { return fmt.Sprintf("e2e-dra-preempt-%d", prio) }
