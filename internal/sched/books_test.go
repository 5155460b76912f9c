package sched

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func gpuNode(name string, gpus int, beat time.Time) *v1alpha2.GPUNode {
	n := &v1alpha2.GPUNode{Status: v1alpha2.GPUNodeStatus{State: v1alpha2.NodeWorking, UpdateTime: metav1.NewTime(beat)}}
	n.Name = name
	for i := 0; i < gpus; i++ {
		n.Status.GPUs = append(n.Status.GPUs, v1alpha2.GPU{Index: int32(i), UUID: name + "-" + string(rune('a'+i)), Memory: v1alpha2.Bytes(1 << 34), UnitsTotal: 100, UnitsFree: 100, MemoryFree: v1alpha2.Bytes(1 << 34), Health: v1alpha2.GPUHealthy})
	}
	return n
}

// setGPUNode records the row and a Lease renewed at its updateTime.
func setGPUNode(l *Books, n *v1alpha2.GPUNode) error {
	if err := l.SetGPUNode(n); err != nil {
		return err
	}
	l.SetLease(n.Name, alloc.Lease{Renewed: n.Status.UpdateTime.Time})
	return nil
}

func newBooks(t *testing.T) (*Books, *clocktesting.FakePassiveClock) {
	t.Helper()
	clk := clocktesting.NewFakePassiveClock(t0)
	return NewBooks(alloc.Config{UtilizationThreshold: 95, HeartbeatTimeout: time.Minute, DefaultPlacement: api.PlacementBinpack}, clk), clk
}

func TestBooksHeartbeatUsesClock(t *testing.T) {
	l, clk := newBooks(t)
	if err := setGPUNode(l, gpuNode("n1", 1, t0)); err != nil {
		t.Fatal(err)
	}
	req := &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: 1, Units: 10}}}
	if err := l.Check("n1", req); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(t0.Add(61 * time.Second))
	if err := l.Check("n1", req); err == nil || !strings.Contains(err.Error(), "Lease expired") {
		t.Fatalf("expired Lease: %v", err)
	}
	if _, err := l.Reserve("p", "n1", req); err == nil {
		t.Fatal("reserved on a stale node")
	}
}

func TestBooksInvalidGPUNodeRemovesNode(t *testing.T) {
	l, _ := newBooks(t)
	if err := setGPUNode(l, gpuNode("n1", 1, t0)); err != nil {
		t.Fatal(err)
	}
	bad := gpuNode("n1", 2, t0)
	bad.Status.GPUs[1].UUID = bad.Status.GPUs[0].UUID
	if err := l.SetGPUNode(bad); !errors.Is(err, v1alpha2.ErrInvalidGPUNode) {
		t.Fatalf("err = %v", err)
	}
	req := &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: 1, Units: 10}}}
	if err := l.Check("n1", req); err == nil {
		t.Fatal("fit on a node whose row is invalid")
	}
}

func boundPod(uid, node, annotation string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID("uid-" + uid), Name: uid, Namespace: "default"}}
	p.Spec.NodeName = node
	if annotation != "" {
		p.Annotations = map[string]string{api.AnnotationAssignment: annotation}
	}
	return p
}

func TestBooksObservePod(t *testing.T) {
	l, _ := newBooks(t)
	if err := setGPUNode(l, gpuNode("n1", 2, t0)); err != nil {
		t.Fatal(err)
	}
	req := &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: 1, Units: 40}}}
	a, err := l.Reserve("uid-p1", "n1", req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := a.Marshal()
	// The bound pod comes back through the informer: same holding, not twice.
	if err := l.ObservePod(boundPod("p1", "n1", string(raw))); err != nil {
		t.Fatal(err)
	}
	if u := l.Usage("n1"); u[0].Units != 40 || u[0].Pods != 1 {
		t.Fatalf("usage after observe: %+v", u)
	}
	// Unbound pods and pods without annotation book nothing.
	for _, p := range []*corev1.Pod{boundPod("p2", "", string(raw)), boundPod("p3", "n1", "")} {
		if err := l.ObservePod(p); err != nil {
			t.Fatal(err)
		}
	}
	// Malformed or mismatched annotations are errors and book nothing.
	if err := l.ObservePod(boundPod("p4", "n1", "{garbage")); !errors.Is(err, api.ErrInvalidAssignment) {
		t.Fatalf("garbage: %v", err)
	}
	if err := l.ObservePod(boundPod("p5", "n2", string(raw))); err == nil || !strings.Contains(err.Error(), "bound to") {
		t.Fatalf("mismatch: %v", err)
	}
	if u := l.Usage("n1"); u[0].Units != 40 || u[0].Pods != 1 || len(u) != 1 {
		t.Fatalf("usage changed by bad input: %+v", u)
	}
	done := boundPod("p1", "n1", string(raw))
	done.Status.Phase = corev1.PodSucceeded
	if err := l.ObservePod(done); err != nil {
		t.Fatal(err)
	}
	if u := l.Usage("n1"); len(u) != 0 {
		t.Fatalf("terminated pod still holds: %+v", u)
	}
}

func TestBooksReserveRetryReplacesHolding(t *testing.T) {
	l, _ := newBooks(t)
	if err := setGPUNode(l, gpuNode("n1", 1, t0)); err != nil {
		t.Fatal(err)
	}
	req := &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: 1, Units: 60}}}
	if _, err := l.Reserve("u", "n1", req); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve("u", "n1", req); err != nil {
		t.Fatalf("retry of the same pod: %v", err)
	}
	if _, err := l.Reserve("v", "n1", req); err == nil {
		t.Fatal("second pod over-committed the GPU")
	}
}

// TestBooksConcurrentReaders: the scheduler's readers (Best in PreFilter,
// Check and Score from Filter's and Score's parallel workers, Quality and
// Usage for metrics) share the books under the read lock; run them at once
// right after the node set changed (go test -race checks they only read).
func TestBooksConcurrentReaders(t *testing.T) {
	l, _ := newBooks(t)
	names := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"}
	req := &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: 1, Units: 10}}}
	for round := range 20 {
		if err := setGPUNode(l, gpuNode(names[round%len(names)], 2, t0)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if best := l.Best(req, 2, nil); len(best) != min(2, round+1) {
					t.Errorf("round %d: best %v", round, best)
				}
			})
			wg.Go(func() {
				for _, n := range names[:min(round+1, len(names))] {
					if err := l.Check(n, req); err != nil {
						t.Errorf("round %d: check %s: %v", round, n, err)
					}
					_ = l.Score(n, req)
					_ = l.Usage(n)
				}
				_ = l.Quality()
			})
		}
		wg.Wait()
	}
}

// TestBooksFloor: the lowest priority below a preemptor's among the pods
// the books hold follows bound pods (their spec's priority), reservations
// and releases, and a terminated pod.
func TestBooksFloor(t *testing.T) {
	l, _ := newBooks(t)
	if err := setGPUNode(l, gpuNode("n1", 4, t0)); err != nil {
		t.Fatal(err)
	}
	floor := func(below int32) string {
		f, ok := l.Floor(below)
		if !ok {
			return "none"
		}
		return fmt.Sprint(f)
	}
	if got := floor(1000); got != "none" {
		t.Fatalf("empty books: floor %s", got)
	}
	req := &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: 1, Units: 10}}}
	var raws []string
	for i, prio := range []int32{5, -3, 0} {
		a, err := l.ReserveWith(fmt.Sprint("uid-p", i), "n1", prio, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := a.Marshal()
		raws = append(raws, string(raw))
	}
	for below, want := range map[int32]string{1000: "-3", 0: "-3", -3: "none", 6: "-3"} {
		if got := floor(below); got != want {
			t.Errorf("Floor(%d) = %s, want %s", below, got, want)
		}
	}
	// Bound: the pod's own priority (here -3 becomes 2: the reservation
	// came from a cycle that read another value).
	p1 := boundPod("p1", "n1", raws[1])
	p1.Spec.Priority = ptr.To[int32](2)
	if err := l.ObservePod(p1); err != nil {
		t.Fatal(err)
	}
	if got := floor(1000); got != "0" {
		t.Fatalf("after p1 was observed with priority 2: Floor(1000) = %s, want 0", got)
	}
	if got := floor(3); got != "0" {
		t.Fatalf("Floor(3) = %s, want 0", got)
	}
	done := boundPod("p2", "n1", raws[2])
	done.Status.Phase = corev1.PodFailed
	if err := l.ObservePod(done); err != nil {
		t.Fatal(err)
	}
	if got := floor(1000); got != "2" {
		t.Fatalf("after p2 (priority 0) ended: Floor(1000) = %s, want 2", got)
	}
	l.Release("uid-p1")
	l.Release("uid-p0")
	if got := floor(1000); got != "none" || len(l.prio) != 0 {
		t.Fatalf("all released: Floor(1000) = %s, %d priorities kept", got, len(l.prio))
	}
}

// TestBooksBusyGPUs: the GPUs measured above the threshold (95), by UUID,
// follow each node's latest row and go with the node.
func TestBooksBusyGPUs(t *testing.T) {
	l, _ := newBooks(t)
	a, b := gpuNode("a", 2, t0), gpuNode("b", 2, t0)
	a.Status.GPUs[1].UtilizationPercent = 96
	b.Status.GPUs[0].UtilizationPercent = 95 // at the threshold: not busy
	for _, n := range []*v1alpha2.GPUNode{a, b} {
		if err := setGPUNode(l, n); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.BusyGPUs(""); len(got) != 1 || !got["a-b"] {
		t.Fatalf("busy %v, want [a-b]", got)
	}
	b = b.DeepCopy()
	b.Status.GPUs[0].UtilizationPercent = 100
	if err := setGPUNode(l, b); err != nil {
		t.Fatal(err)
	}
	if got := l.BusyGPUs(""); len(got) != 2 || !got["a-b"] || !got["b-a"] {
		t.Fatalf("busy %v, want [a-b b-a]", got)
	}
	if got := l.BusyGPUs("a"); len(got) != 1 || !got["b-a"] {
		t.Fatalf("busy but node a's %v, want [b-a] (a preemptor nominated to a sees a's GPUs)", got)
	}
	a = a.DeepCopy()
	a.Status.GPUs[1].UtilizationPercent = 10
	if err := setGPUNode(l, a); err != nil {
		t.Fatal(err)
	}
	l.RemoveGPUNode("b")
	if got := l.BusyGPUs(""); got != nil {
		t.Fatalf("busy %v after a's GPU cooled and b left, want none", got)
	}
}
