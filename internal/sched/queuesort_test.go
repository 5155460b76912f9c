package sched

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// queued is a queued pod of priority prio, nominated to node ("": not),
// added to the queue at second at.
func queued(t *testing.T, name string, prio int32, node string, at int) *framework.QueuedPodInfo {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: corev1.PodSpec{Priority: &prio}, Status: corev1.PodStatus{NominatedNodeName: node}}
	pi, err := framework.NewPodInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	return &framework.QueuedPodInfo{PodInfo: pi,
		QueueingParams: framework.QueueingParams{Timestamp: time.Unix(int64(at), 0)}}
}

func TestQueueSortLess(t *testing.T) {
	cases := []struct {
		name string
		a, b *framework.QueuedPodInfo
		want bool
	}{
		{"higher priority first", queued(t, "a", 10, "", 5), queued(t, "b", 0, "n", 1), true},
		{"lower priority after, even nominated", queued(t, "a", 0, "n", 1), queued(t, "b", 10, "", 5), false},
		{"nominated before fresh of equal priority", queued(t, "a", 5, "n", 9), queued(t, "b", 5, "", 1), true},
		{"fresh after nominated", queued(t, "a", 5, "", 1), queued(t, "b", 5, "n", 9), false},
		{"both nominated: first in first out", queued(t, "a", 5, "n", 1), queued(t, "b", 5, "m", 2), true},
		{"both fresh: first in first out", queued(t, "a", 5, "", 2), queued(t, "b", 5, "", 1), false},
		{"same time: neither", queued(t, "a", 5, "", 1), queued(t, "b", 5, "", 1), false},
	}
	var qs QueueSort
	for _, c := range cases {
		if got := qs.Less(c.a, c.b); got != c.want {
			t.Errorf("%s: Less = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestQueueSortStrictWeakOrder checks Less over every triple of a set of
// entries: irreflexive, asymmetric, transitive, and incomparability
// transitive (what a heap needs).
func TestQueueSortStrictWeakOrder(t *testing.T) {
	var es []fwk.QueuedEntityInfo
	for _, prio := range []int32{0, 5} {
		for _, node := range []string{"", "n"} {
			for _, at := range []int{1, 2} {
				es = append(es, queued(t, "p", prio, node, at), queued(t, "q", prio, node, at))
			}
		}
	}
	var qs QueueSort
	less := qs.Less
	incomparable := func(a, b fwk.QueuedEntityInfo) bool { return !less(a, b) && !less(b, a) }
	for i, a := range es {
		if less(a, a) {
			t.Fatalf("entry %d: Less(a, a)", i)
		}
		for j, b := range es {
			if less(a, b) && less(b, a) {
				t.Fatalf("entries %d, %d: Less both ways", i, j)
			}
			for k, c := range es {
				if less(a, b) && less(b, c) && !less(a, c) {
					t.Fatalf("entries %d < %d < %d but not %d < %d", i, j, k, i, k)
				}
				if incomparable(a, b) && incomparable(b, c) && !incomparable(a, c) {
					t.Fatalf("entries %d ~ %d ~ %d but not %d ~ %d", i, j, k, i, k)
				}
			}
		}
	}
}

// TestQueueSortPodGroup: an entry that is not a single pod is ordered by
// priority and time alone.
func TestQueueSortPodGroup(t *testing.T) {
	g := &framework.QueuedPodGroupInfo{QueueingParams: framework.QueueingParams{Timestamp: time.Unix(1, 0)}}
	if nominated(g) {
		t.Fatal("a pod group counts as nominated")
	}
	if !nominated(queued(t, "a", 0, "n", 1)) || nominated(queued(t, "a", 0, "", 1)) {
		t.Fatal("nominated() does not read the pod's status")
	}
}
