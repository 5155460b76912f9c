package sched

import (
	"context"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

type recordActivator struct{ got []string }

func (r *recordActivator) Activate(_ klog.Logger, pods map[string]*corev1.Pod) {
	for k := range pods {
		r.got = append(r.got, k)
	}
	sort.Strings(r.got)
}

func waitPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
}

func TestWaitersWakeParkedPods(t *testing.T) {
	ctx := context.Background()
	act := &recordActivator{}
	w := &waiters{activator: act}
	g := w.generation()
	w.park(ctx, waitPod("a"), g)
	w.park(ctx, waitPod("b"), g)
	if len(act.got) != 0 {
		t.Fatalf("activated before any release: %v", act.got)
	}
	w.wake(ctx)
	if len(act.got) != 2 || act.got[0] != "ns/a" || act.got[1] != "ns/b" {
		t.Fatalf("woken %v", act.got)
	}
	act.got = nil
	w.wake(ctx) // nothing parked any more
	if len(act.got) != 0 {
		t.Fatalf("woken twice: %v", act.got)
	}
}

// A release between the start of a cycle and its PostFilter must not leave
// the pod parked: it is re-activated at once.
func TestWaitersReleaseDuringCycle(t *testing.T) {
	ctx := context.Background()
	act := &recordActivator{}
	w := &waiters{activator: act}
	g := w.generation()
	w.wake(ctx) // capacity freed while the pod was being filtered
	w.park(ctx, waitPod("c"), g)
	if len(act.got) != 1 || act.got[0] != "ns/c" {
		t.Fatalf("activated %v, want ns/c at once", act.got)
	}
}
