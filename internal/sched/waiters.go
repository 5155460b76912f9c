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
	// helps reports whether what pod freed can help a parked pod (nil:
	// always): a preemptor waiting for its own victims is not retried for
	// another preemptor's (in a burst of preemptions, retrying every parked
	// pod on every eviction was most of the scheduler's work).
	helps  func(parked *corev1.Pod, freed types.UID) bool
	mu     sync.Mutex
	gen    uint64 // bumped on every release of capacity
	parked map[string]*corev1.Pod
	// recent: the last releases, newest last (freed "": any pod may fit).
	recent []release
	// wide: pods that fit nowhere among their candidate nodes once; they
	// are next filtered against every node.
	wide map[types.UID]bool
}

// release is one release of capacity: at gen, by pod freed ("": unknown).
type release struct {
	gen   uint64
	freed types.UID
}

// recentReleases bounds the releases remembered for park: a cycle older
// than them re-activates its pod.
const recentReleases = 1024

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
// generation gen; if capacity that may help it was freed since, it is
// re-activated at once.
func (w *waiters) park(ctx context.Context, pod *corev1.Pod, gen uint64) {
	w.mu.Lock()
	if !w.freedSinceLocked(pod, gen) {
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

// freedSinceLocked reports whether a release after gen may help pod.
func (w *waiters) freedSinceLocked(pod *corev1.Pod, gen uint64) bool {
	if w.gen == gen {
		return false
	}
	if len(w.recent) == 0 || w.recent[0].gen > gen+1 {
		return true // older than what is remembered
	}
	for _, r := range w.recent {
		if r.gen > gen && w.mayHelp(pod, r.freed) {
			return true
		}
	}
	return false
}

func (w *waiters) mayHelp(pod *corev1.Pod, freed types.UID) bool {
	return freed == "" || w.helps == nil || w.helps(pod, freed)
}

// wake re-activates every parked pod: capacity was freed.
func (w *waiters) wake(ctx context.Context) { w.wakeFor(ctx, "") }

// wakeFor re-activates the parked pods that what pod freed released may
// help ("": every parked pod).
func (w *waiters) wakeFor(ctx context.Context, freed types.UID) {
	w.mu.Lock()
	w.gen++
	w.recent = append(w.recent, release{gen: w.gen, freed: freed})
	if len(w.recent) > recentReleases {
		w.recent = append(w.recent[:0], w.recent[len(w.recent)-recentReleases:]...)
	}
	var pods map[string]*corev1.Pod
	for k, p := range w.parked {
		if w.mayHelp(p, freed) {
			if pods == nil {
				pods = map[string]*corev1.Pod{}
			}
			pods[k] = p
			delete(w.parked, k)
		}
	}
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
