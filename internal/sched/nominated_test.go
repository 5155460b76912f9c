package sched

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// TestPreFilterNominatedNode: a pod nominated to a node where it fits by the
// books gets that node alone; where it does not (full, or held for another
// nominated pod of at least its priority), the books rank every node as
// before.
func TestPreFilterNominatedNode(t *testing.T) {
	l, _ := newBooks(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		if err := setGPUNode(l, gpuNode(n, 1, t0)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Reserve("full", "n3", mustRequest(t, gpuPod("full", 100))); err != nil {
		t.Fatal(err)
	}
	p := &Plugin{alloc: l, events: &eventsDouble{}, wait: &waiters{}, candidates: 8}
	prefilter := func(node string, prio int32) []string {
		t.Helper()
		pod := prioritized(gpuPod("hi", 60), prio)
		pod.Status.NominatedNodeName = node
		r, st := p.PreFilter(context.Background(), framework.NewCycleState(), pod, nil)
		if !st.IsSuccess() || r == nil {
			t.Fatalf("nominated to %q: %v, %v", node, r, st)
		}
		return sets.List(r.NodeNames)
	}
	if got := prefilter("n2", 1000); len(got) != 1 || got[0] != "n2" {
		t.Fatalf("nominated to n2 with room: %v, want [n2]", got)
	}
	if got := prefilter("n3", 1000); len(got) != 2 {
		t.Fatalf("nominated to the full n3: %v, want the ranking of n1 and n2", got)
	}
	// n2 held for another nominated pod of the same priority (50 units):
	// 60 more do not fit there.
	other := prioritized(gpuPod("other", 50), 1000)
	p.nominated = func(node string) []fwk.PodInfo {
		if node == "n2" {
			return []fwk.PodInfo{podInfo(t, other)}
		}
		return nil
	}
	if got := prefilter("n2", 1000); len(got) == 1 && got[0] == "n2" {
		t.Fatal("handed n2 alone although it is held for another nominated pod")
	}
	// Held for a lower-priority pod: not counted against a higher one.
	if got := prefilter("n2", 2000); len(got) != 1 || got[0] != "n2" {
		t.Fatalf("a lower-priority nomination held n2 against priority 2000: %v", got)
	}
}

func mustRequest(t *testing.T, pod *corev1.Pod) *api.PodRequest {
	t.Helper()
	req, err := api.ParseRequest(pod)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
