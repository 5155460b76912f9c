package sched

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// lockedActivator is recordActivator safe for the goroutine of failed.
type lockedActivator struct {
	mu  sync.Mutex
	got []string
}

func (r *lockedActivator) Activate(_ klog.Logger, pods map[string]*corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range pods {
		r.got = append(r.got, k)
	}
	slices.Sort(r.got)
}

func (r *lockedActivator) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
}

func TestDRAFlights(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// run drives the flights around the refusal of pod "b" in a
		// cycle that started at gen; it returns the activations seen
		// right after the refusal and after the rest of the script.
		run       func(f *draFlights, act *lockedActivator) (atRefusal, after []string)
		atRefusal []string
		after     []string
	}{
		{
			name: "no binding in flight: left to the queueing hints",
			run: func(f *draFlights, act *lockedActivator) ([]string, []string) {
				f.refused(ctx, waitPod("b"), f.generation())
				return act.take(), nil
			},
		},
		{
			name: "a binding in flight: retried when it ends",
			run: func(f *draFlights, act *lockedActivator) ([]string, []string) {
				f.begin("a")
				f.refused(ctx, waitPod("b"), f.generation())
				now := act.take()
				f.end(ctx, "a")
				return now, act.take()
			},
			after: []string{"ns/b"},
		},
		{
			name: "a binding ended during the cycle: retried at once",
			run: func(f *draFlights, act *lockedActivator) ([]string, []string) {
				f.begin("a")
				gen := f.generation()
				f.end(ctx, "a")
				f.refused(ctx, waitPod("b"), gen)
				return act.take(), act.take()
			},
			atRefusal: []string{"ns/b"},
		},
		{
			name: "the end of a pod never in flight wakes nobody",
			run: func(f *draFlights, act *lockedActivator) ([]string, []string) {
				f.begin("a")
				f.refused(ctx, waitPod("b"), f.generation())
				now := act.take()
				f.end(ctx, "other")
				f.failed(ctx, "other", nil) // never in flight: returns at once, nothing started
				return now, act.take()
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			act := &lockedActivator{}
			f := newDRAFlights(&waiters{activator: act}, func(types.UID) bool { return false })
			now, after := tc.run(f, act)
			if !slices.Equal(now, tc.atRefusal) || !slices.Equal(after, tc.after) {
				t.Fatalf("activated %v at the refusal and %v after, want %v and %v", now, after, tc.atRefusal, tc.after)
			}
		})
	}
}

// A failed binding ends once DynamicResources' Unreserve (after GPUSlice's)
// dropped its claims' in-flight allocations, not before: a pod retried
// earlier would be refused again by the same count.
func TestDRAFlightsFailedWaitsForPendingAllocations(t *testing.T) {
	ctx := context.Background()
	act := &lockedActivator{}
	var pending atomic.Bool
	var asked atomic.Int32
	pending.Store(true)
	f := newDRAFlights(&waiters{activator: act}, func(uid types.UID) bool {
		asked.Add(1)
		return uid == "claim-a" && pending.Load()
	})
	f.begin("a")
	f.refused(ctx, waitPod("b"), f.generation())
	f.failed(ctx, "a", []types.UID{"claim-a"})
	// The end waits while the claim is in flight: once it has asked three
	// times (a wait observed, however slow the machine), nobody is woken yet.
	for deadline := time.Now().Add(5 * time.Second); asked.Load() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the failed binding asked about its claim %d times in 5 s, want 3", asked.Load())
		}
	}
	if got := act.take(); len(got) != 0 {
		t.Fatalf("woken %v while a's claim is still in flight", got)
	}
	pending.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	var got []string
	for len(got) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		got = act.take()
	}
	if !slices.Equal(got, []string{"ns/b"}) {
		t.Fatalf("woken %v after a's in-flight allocation went, want [ns/b]", got)
	}
}
