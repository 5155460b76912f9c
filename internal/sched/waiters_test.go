package sched

import (
	"context"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// TestWaitersWakeFor: a release wakes only the parked pods it may help,
// at once and for a cycle it overlapped; a cycle older than the releases
// remembered is woken.
func TestWaitersWakeFor(t *testing.T) {
	ctx := context.Background()
	act := &recordActivator{}
	// "w" waits for its own victim "mine"; everyone else takes anything.
	w := &waiters{activator: act, helps: func(p *corev1.Pod, freed types.UID) bool { return p.Name != "w" || freed == "mine" }}
	g := w.generation()
	w.park(ctx, waitPod("w"), g)
	w.park(ctx, waitPod("x"), g)
	w.wakeFor(ctx, "theirs")
	if len(act.got) != 1 || act.got[0] != "ns/x" {
		t.Fatalf("another's victim woke %v, want ns/x only", act.got)
	}
	act.got = nil
	g = w.generation()
	w.wakeFor(ctx, "theirs") // during w's next cycle
	w.park(ctx, waitPod("w"), g)
	if len(act.got) != 0 {
		t.Fatalf("a release that cannot help woke %v", act.got)
	}
	w.wakeFor(ctx, "mine")
	if len(act.got) != 1 || act.got[0] != "ns/w" {
		t.Fatalf("own victim woke %v, want ns/w", act.got)
	}
	act.got = nil
	g = w.generation()
	w.wakeFor(ctx, "mine") // during the cycle: helps, so parked is woken at once
	w.park(ctx, waitPod("w"), g)
	if len(act.got) != 1 {
		t.Fatalf("own victim released during the cycle: woken %v", act.got)
	}
	act.got = nil
	g = w.generation()
	for range recentReleases + 1 {
		w.wakeFor(ctx, "theirs")
	}
	w.park(ctx, waitPod("w"), g)
	if len(act.got) != 1 || len(w.recent) != recentReleases {
		t.Fatalf("a cycle older than the releases remembered: woken %v, %d remembered", act.got, len(w.recent))
	}
}
