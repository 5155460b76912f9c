package sched

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// waiters parks GPU pods that fit nowhere and re-activates them as soon as
// capacity is freed. The scheduler's own requeue on a pod deletion may run
// before the books have released that pod's GPUs (two handlers of one
// informer); waking after the release closes that race.
type waiters struct {
	activator fwk.PodActivator // nil: no re-activation (tests)
	mu        sync.Mutex
	gen       uint64 // bumped on every release of capacity
	parked    map[string]*corev1.Pod
	// wide: pods that fit nowhere among their candidate nodes once; they
	// are next filtered against every node.
	wide map[types.UID]bool
}

// widen marks a pod to be filtered against every node from now on.
func (w *waiters) widen(pod *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wide == nil {
		w.wide = map[types.UID]bool{}
	}
	w.wide[pod.UID] = true
}

// widened reports whether the pod was widened.
func (w *waiters) widened(pod *corev1.Pod) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wide[pod.UID]
}

// forget drops a scheduled or deleted pod's marks.
func (w *waiters) forget(pod *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.wide, pod.UID)
}

// generation returns the current release generation.
func (w *waiters) generation() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

// park records a pod that fit nowhere in a cycle that started at
// generation gen; if capacity was freed since, it is re-activated at once.
func (w *waiters) park(ctx context.Context, pod *corev1.Pod, gen uint64) {
	w.mu.Lock()
	if w.gen == gen {
		if w.parked == nil {
			w.parked = map[string]*corev1.Pod{}
		}
		w.parked[pod.Namespace+"/"+pod.Name] = pod
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.activate(ctx, map[string]*corev1.Pod{pod.Namespace + "/" + pod.Name: pod})
}

// wake re-activates every parked pod: capacity was freed.
func (w *waiters) wake(ctx context.Context) {
	w.mu.Lock()
	w.gen++
	pods := w.parked
	w.parked = nil
	w.mu.Unlock()
	if len(pods) > 0 {
		w.activate(ctx, pods)
	}
}

func (w *waiters) activate(ctx context.Context, pods map[string]*corev1.Pod) {
	if w.activator != nil {
		w.activator.Activate(klog.FromContext(ctx), pods)
	}
}
