package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/resize"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// sharePod is pod uid bound to n1 with one container sharing GPU idx.
func sharePod(t *testing.T, uid string, idx int32, units, mem int64) (*corev1.Pod, *api.Assignment, string) {
	t.Helper()
	a := &api.Assignment{Version: api.AssignmentVersion, Node: "n1", Containers: []api.ContainerAssignment{{Name: "main",
		GPUs: []api.GPUAssignment{{Index: idx, UUID: "n1-" + string(rune('a'+idx)), Units: units, MemoryBytes: mem}}}}}
	b, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{}
	p.UID, p.Name, p.Spec.NodeName = types.UID(uid), uid, "n1"
	p.Annotations = map[string]string{api.AnnotationAssignment: string(b)}
	return p, a, string(b)
}

func unitsTo(t *testing.T, a *api.Assignment, units int64) *api.Assignment {
	t.Helper()
	to, changed := resize.PlanShares(a, map[string]resize.ShareWant{"main": {Units: units}})
	if !changed {
		t.Fatal("no change")
	}
	return to
}

func TestShareResizeBooksFirst(t *testing.T) {
	l, _ := newBooks(t)
	if err := setGPUNode(l, gpuNode("n1", 1, t0)); err != nil {
		t.Fatal(err)
	}
	p, a, raw := sharePod(t, "p", 0, 25, 1<<30)
	q, _, _ := sharePod(t, "q", 0, 50, 1<<30)
	for _, pod := range []*corev1.Pod{p, q} {
		if err := l.ObservePod(pod); err != nil {
			t.Fatal(err)
		}
	}
	// 25 -> 60 does not fit beside 50: refused, nothing booked.
	if err := l.BeginShareResize("p", raw, a, unitsTo(t, a, 60)); !errors.Is(err, resize.ErrNoRoom) {
		t.Fatalf("25 -> 60 beside 50: %v", err)
	}
	if u := l.Usage("n1")[0].Units; u != 75 {
		t.Fatalf("units booked after a refusal: %d", u)
	}
	// 25 -> 50 fits: booked before the write, so a new pod cannot take it.
	to := unitsTo(t, a, 50)
	if err := l.BeginShareResize("p", raw, a, to); err != nil {
		t.Fatal(err)
	}
	if err := l.Check("n1", &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: 1, Units: 10}}}); err == nil {
		t.Fatal("a new pod fits into units booked for a share change")
	}
	// A failed write rolls back to 25.
	l.EndResize("p", "", false)
	if u := l.Usage("n1")[0].Units; u != 75 {
		t.Fatalf("after rollback: %d units", u)
	}
	// Written: 50 + 50.
	if err := l.BeginShareResize("p", raw, a, to); err != nil {
		t.Fatal(err)
	}
	b, _ := to.Marshal()
	l.EndResize("p", string(b), true)
	if u := l.Usage("n1")[0].Units; u != 100 {
		t.Fatalf("after the write: %d units", u)
	}
	// Shrinking never needs room; the books must hold the pod's annotation.
	if err := l.BeginShareResize("p", raw, a, unitsTo(t, a, 10)); !errors.Is(err, resize.ErrBooksBehind) {
		t.Fatalf("stale annotation: %v", err)
	}
}

// Share changes and new pods under churn never over-commit a GPU.
func TestShareResizeChurnNeverOvercommits(t *testing.T) {
	l, _ := newBooks(t)
	if err := setGPUNode(l, gpuNode("n1", 2, t0)); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	raws := map[string]string{}
	as := map[string]*api.Assignment{}
	for i := range 2000 {
		uid := fmt.Sprint("p", rng.IntN(12))
		switch a := as[uid]; {
		case a == nil:
			req := &api.PodRequest{Containers: []api.ContainerRequest{{Name: "main", Count: 1, Units: 1 + rng.Int64N(40), MemoryBytes: 1 << 30}}}
			got, err := l.Reserve(uid, "n1", req)
			if err != nil {
				continue
			}
			b, _ := got.Marshal()
			raws[uid], as[uid] = string(b), got
			pod := &corev1.Pod{}
			pod.UID, pod.Name, pod.Spec.NodeName = types.UID(uid), uid, "n1"
			pod.Annotations = map[string]string{api.AnnotationAssignment: raws[uid]}
			if err := l.ObservePod(pod); err != nil {
				t.Fatal(err)
			}
		case rng.IntN(4) == 0:
			l.Release(uid)
			delete(as, uid)
		default:
			to, changed := resize.PlanShares(a, map[string]resize.ShareWant{"main": {Units: 1 + rng.Int64N(100)}})
			if !changed {
				continue
			}
			if err := l.BeginShareResize(uid, raws[uid], a, to); err != nil {
				if !errors.Is(err, resize.ErrNoRoom) {
					t.Fatalf("step %d: %v", i, err)
				}
				continue
			}
			written := rng.IntN(5) != 0
			b, _ := to.Marshal()
			l.EndResize(uid, string(b), written)
			if written {
				raws[uid], as[uid] = string(b), to
			}
		}
		l.mu.RLock()
		over := l.books.Overcommitted()
		l.mu.RUnlock()
		if len(over) > 0 {
			t.Fatalf("step %d: over-committed %v", i, over)
		}
	}
}
