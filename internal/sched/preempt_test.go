package sched

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// prioritized sets a pod's priority.
func prioritized(p *corev1.Pod, prio int32) *corev1.Pod {
	p.Spec.Priority = &prio
	return p
}

func podInfo(t *testing.T, p *corev1.Pod) fwk.PodInfo {
	t.Helper()
	pi, err := framework.NewPodInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

// onOneGPU books pods of the given units on n1's only GPU.
func onOneGPU(t *testing.T, units ...int64) (*Books, *Plugin, []*corev1.Pod) {
	t.Helper()
	l, _ := newBooks(t)
	if err := setGPUNode(l, gpuNode("n1", 1, t0)); err != nil {
		t.Fatal(err)
	}
	p := &Plugin{alloc: l, writer: &writerDouble{bound: map[string]*api.Assignment{}}, events: &eventsDouble{}, wait: &waiters{}}
	var pods []*corev1.Pod
	for i, u := range units {
		pod := gpuPod(string(rune('a'+i)), u)
		if st := schedule(p, pod); st != nil {
			t.Fatalf("%s: %v", pod.Name, st)
		}
		pods = append(pods, pod)
	}
	return l, p, pods
}

// TestRemovePodFreesForFilter: preemption's dry run takes a victim off the
// node (RemovePod) and Filter sees its units free; putting it back (AddPod)
// undoes that; the clone the framework makes per node is independent; the
// books never change.
func TestRemovePodFreesForFilter(t *testing.T) {
	l, p, pods := onOneGPU(t, 60, 40)
	ctx := context.Background()
	ni := nodeInfo("n1")
	state := framework.NewCycleState()
	hi := prioritized(gpuPod("hi", 50), 1000)
	if _, st := p.PreFilter(ctx, state, hi, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, state, hi, ni); st.IsSuccess() {
		t.Fatal("50 units fit on a full GPU")
	}
	dry := state.Clone()
	if st := p.PreFilterExtensions().RemovePod(ctx, dry, hi, podInfo(t, pods[1]), ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, dry, hi, ni); st.IsSuccess() {
		t.Fatal("50 units fit in the 40 freed")
	}
	if st := p.PreFilterExtensions().RemovePod(ctx, dry, hi, podInfo(t, pods[0]), ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, dry, hi, ni); !st.IsSuccess() {
		t.Fatalf("both taken off: %v", st)
	}
	if st := p.Filter(ctx, state, hi, ni); st.IsSuccess() {
		t.Fatal("the dry run's removals leaked into the cycle it was cloned from")
	}
	if st := p.PreFilterExtensions().AddPod(ctx, dry, hi, podInfo(t, pods[0]), ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, dry, hi, ni); st.IsSuccess() {
		t.Fatal("a put back pod still counted as gone")
	}
	if u := l.Usage("n1")[0]; u.Units != 100 || u.Pods != 2 {
		t.Fatalf("books changed by the dry run: %+v", u)
	}
}

// TestNominatedPodHoldsItsShare: a pod nominated to the node (added by the
// framework through AddPod before Filter) keeps the freed share from a pod
// that arrives later, in Filter and in Reserve.
func TestNominatedPodHoldsItsShare(t *testing.T) {
	l, p, _ := onOneGPU(t, 50)
	ctx := context.Background()
	ni := nodeInfo("n1")
	nominated := prioritized(gpuPod("hi", 50), 1000)
	late := gpuPod("late", 30)
	state := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, state, late, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, state, late, ni); !st.IsSuccess() {
		t.Fatalf("without the nominated pod: %v", st)
	}
	withNom := state.Clone()
	if st := p.PreFilterExtensions().AddPod(ctx, withNom, late, podInfo(t, nominated), ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, withNom, late, ni); st.IsSuccess() {
		t.Fatal("the late pod took the nominated pod's share")
	}
	// Reserve holds for it too.
	p.nominated = func(node string) []fwk.PodInfo { return []fwk.PodInfo{podInfo(t, nominated)} }
	if st := p.Reserve(ctx, state, late, "n1"); st.IsSuccess() {
		t.Fatal("Reserve gave the late pod the nominated pod's share")
	}
	if u := l.Usage("n1")[0]; u.Units != 50 {
		t.Fatalf("books after a refused Reserve: %+v", u)
	}
	// A nominated pod of lower priority holds nothing against a higher one.
	urgent := prioritized(gpuPod("urgent", 30), 2000)
	st2 := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, st2, urgent, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Reserve(ctx, st2, urgent, "n1"); !st.IsSuccess() {
		t.Fatalf("higher-priority pod held back by a lower nominated one: %v", st)
	}
}

// TestCandidateCount: as DefaultPreemption, 10 % of the nodes, at least 100,
// never more than there are.
func TestCandidateCount(t *testing.T) {
	pr := &preemptor{}
	for _, tc := range []struct{ nodes, want int32 }{{0, 0}, {5, 5}, {100, 100}, {500, 100}, {1000, 100}, {5000, 500}} {
		off, n := pr.GetOffsetAndNumCandidates(tc.nodes)
		if n != tc.want || off < 0 || (tc.nodes > 0 && off >= tc.nodes) {
			t.Errorf("%d nodes: offset %d, %d candidates; want %d", tc.nodes, off, n, tc.want)
		}
	}
}
