package sched

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

func TestRowMayAdmitMore(t *testing.T) {
	base := gpuNode("n1", 2, t0)
	later := t0.Add(10 * time.Second)
	beat := func(g *v1alpha2.GPUNode, at time.Time) *v1alpha2.GPUNode {
		c := g.DeepCopy()
		c.Status.UpdateTime = metav1.NewTime(at)
		return c
	}
	cases := []struct {
		name     string
		old, cur *v1alpha2.GPUNode
		now      time.Time
		want     bool
	}{
		{"added", nil, base, later, true},
		{"deleted", base, nil, later, false},
		{"updateTime only", base, beat(base, later), later, false},
		{"state", base, func() *v1alpha2.GPUNode { c := beat(base, later); c.Status.State = v1alpha2.NodeDraining; return c }(), later, true},
		{"gpu freed", base, func() *v1alpha2.GPUNode { c := beat(base, later); c.Status.GPUs[1].UtilizationPercent = 5; return c }(), later, true},
	}
	for _, tc := range cases {
		if got := rowMayAdmitMore(tc.old, tc.cur); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPodHint: a parked pod is retried for pod events that may free GPUs
// for it, and not for those that cannot (a victim being marked or
// terminating, a running pod's status, another pod being nominated), nor
// for another preemptor's victim while it waits for its own.
func TestPodHint(t *testing.T) {
	mk := func(uid, node string, mut func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: types.UID(uid),
			Annotations: map[string]string{api.AnnotationAssignment: "a-" + uid}}, Spec: corev1.PodSpec{NodeName: node}}
		if mut != nil {
			mut(p)
		}
		return p
	}
	p := &Plugin{preempt: &preemptor{rec: newPreempted(time.Minute)}}
	p.preempt.rec.chose("waiter", "n1", []string{"mine"})
	p.preempt.rec.commit("waiter", "n1", time.Now()) // the hint reads the clock: within the ttl
	fresh := mk("fresh", "", nil)
	waiter := mk("waiter", "", func(p *corev1.Pod) { p.Status.NominatedNodeName = "n1" })
	running := mk("run", "n2", nil)
	mine, theirs := mk("mine", "n1", nil), mk("theirs", "n3", nil)
	cases := []struct {
		name     string
		pod      *corev1.Pod
		old, cur *corev1.Pod
		want     fwk.QueueingHint
	}{
		{"deleted", fresh, running, nil, fwk.Queue},
		{"own victim deleted", waiter, mine, nil, fwk.Queue},
		{"another's victim deleted", waiter, theirs, nil, fwk.QueueSkip},
		{"status only", fresh, running, mk("run", "n2", func(p *corev1.Pod) { p.Status.Message = "x" }), fwk.QueueSkip},
		{"terminating", fresh, running, mk("run", "n2", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }), fwk.QueueSkip},
		{"succeeded", fresh, running, mk("run", "n2", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), fwk.Queue},
		{"another's victim failed", waiter, theirs, mk("theirs", "n3", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), fwk.QueueSkip},
		{"resized", fresh, running, mk("run", "n2", func(p *corev1.Pod) { p.Annotations[api.AnnotationAssignment] = "b" }), fwk.Queue},
		{"itself", fresh, fresh, mk("fresh", "", func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} }), fwk.Queue},
		{"another nominated", fresh, mk("o", "", nil), mk("o", "", func(p *corev1.Pod) { p.Status.NominatedNodeName = "n1" }), fwk.QueueSkip},
		{"another's nomination moved", fresh, waiter, mk("waiter", "", func(p *corev1.Pod) { p.Status.NominatedNodeName = "n4" }), fwk.Queue},
		{"nominee bound there", fresh, waiter, mk("waiter", "n1", nil), fwk.QueueSkip},
		{"nominee bound elsewhere", fresh, waiter, mk("waiter", "n5", nil), fwk.Queue},
	}
	for _, tc := range cases {
		var cur any
		if tc.cur != nil {
			cur = tc.cur
		}
		got, err := p.podHint(klog.Background(), tc.pod, tc.old, cur)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// TestClaimFreedHint: a claim's deallocation or the deletion of an
// allocated claim retries a pod PreFilter refused; other claim changes do
// not.
func TestClaimFreedHint(t *testing.T) {
	allocated := &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}}}
	free := &resourceapi.ResourceClaim{}
	for _, c := range []struct {
		name     string
		old, cur any
		want     fwk.QueueingHint
	}{
		{"deallocated", allocated, free, fwk.Queue},
		{"allocated", free, allocated, fwk.QueueSkip},
		{"unchanged allocation", allocated, allocated, fwk.QueueSkip},
		{"deleted allocated", allocated, nil, fwk.Queue},
		{"deleted free", free, nil, fwk.QueueSkip},
		{"deleted, final state unknown", cache.DeletedFinalStateUnknown{Obj: free}, nil, fwk.Queue},
	} {
		if got, err := claimFreedHint(klog.Background(), nil, c.old, c.cur); err != nil || got != c.want {
			t.Errorf("%s: hint %v (%v), want %v", c.name, got, err, c.want)
		}
	}
}
