package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// What the preemption phase's runs (gpuslice-scheduler's, and the stock
// kube-scheduler's baseline in stockpreempt.go) share: the preemptors,
// their arrival, the warm-up and the latency definition.

// preemptorPod is the i-th priority-1000 pod: 50 units, 80 units and one
// whole GPU in turn (each needs one victim at best).
func preemptorPod(ns, scheduler, priorityClass string, i int) *corev1.Pod {
	req := []harness.GPURequest{{Units: 50, Memory: 8 * harness.GiB}, {Units: 80, Memory: 8 * harness.GiB}, {GPUs: 1}}[i%3]
	p := harness.Pod(ns, fmt.Sprintf("p-%05d", i), scheduler, req)
	p.Labels = map[string]string{preemptorLabel: "true"}
	p.Spec.PriorityClassName = priorityClass
	prio := int32(preemptorPrio)
	p.Spec.Priority = &prio // the harness's API server runs without the Priority admission plugin
	return p
}

// arrivals records when each preemptor was created.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

// startPreemptors creates o.preemptors preemptors for scheduler in the
// background, as -preempt-rate says (arrive), recording their creation
// times.
func startPreemptors(ctx context.Context, cp *harness.ControlPlane, o options, ns, scheduler, priorityClass string) *arrivals {
	a := &arrivals{at: make([]time.Time, o.preemptors)}
	create := func(i int) error {
		p := preemptorPod(ns, scheduler, priorityClass, i)
		a.mu.Lock()
		a.at[i] = time.Now()
		a.mu.Unlock()
		_, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	}
	go func() { _ = arrive(ctx, o.clients, o.preemptors, o.preemptRate, create) }()
	return a
}

// times returns a copy of the creation times (read once all are bound).
func (a *arrivals) times() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.at)
}

// creationToBound is p50 and p99 of creation -> bound seen over the
// preemptors; a preemptor not bound (the wait capped: ratesweep.go) counts
// as unbound, longer than any.
func creationToBound(created []time.Time, bound map[int]time.Time) (p50, p99 time.Duration) {
	n := len(created)
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		b, ok := bound[i]
		if !ok {
			lat = append(lat, unbound)
			continue
		}
		lat = append(lat, b.Sub(created[i]))
	}
	slices.Sort(lat)
	return lat[n/2], lat[n*99/100]
}

// arrivalText says how the preemptors arrived.
func arrivalText(o options) string {
	if o.preemptRate > 0 {
		return fmt.Sprintf("at %g/s", o.preemptRate)
	}
	return "at once"
}

// warmUpPreempt waits until the scheduler has bound a pod without GPUs (the
// cluster has none free): start-up (informers listing every filler pod) is
// not measured.
func warmUpPreempt(ctx context.Context, cp *harness.ControlPlane, ns, name, scheduler string, sched *harness.Process) error {
	wp := harness.Pod(ns, name, scheduler, harness.GPURequest{})
	wp.Labels = map[string]string{preemptorLabel: "warm-up"}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, wp, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("warm-up pod: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := harness.WaitFor(wctx, 100*time.Millisecond, func() (bool, error) {
		got, err := cp.Client.CoreV1().Pods(ns).Get(wctx, name, metav1.GetOptions{})
		return err == nil && got.Spec.NodeName != "", nil
	}); err != nil {
		return fmt.Errorf("%s never bound the warm-up pod: %w\n%s", scheduler, err, sched.Tail())
	}
	return nil
}

// phaseRun is one scheduler's run of the preemption phase: started, its
// start-up (informers listing every filler pod) left out by binding a
// warm-up pod without GPUs first, its bindings watched and the cluster's
// costs counted from the burst on.
type phaseRun struct {
	sched *harness.Process
	tl    *timeline
	seen  *boundTimes
	cpu0  float64
	cost  *phaseCost
	stop  context.CancelFunc
}

// startPhaseRun starts bin as so says and gets it ready for the burst; the
// caller closes the run.
func startPhaseRun(ctx context.Context, cp *harness.ControlPlane, ph phase, bin, warmup string, so harness.SchedulerOptions) (*phaseRun, error) {
	sched, err := cp.StartScheduler(ctx, bin, so.SchedulerName, so)
	if err != nil {
		return nil, err
	}
	r := &phaseRun{sched: sched, tl: newTimeline(), stop: func() {}}
	if err := warmUpPreempt(ctx, cp, ph.ns, warmup, so.SchedulerName, sched); err != nil {
		r.close()
		return nil, err
	}
	ictx, stop := context.WithCancel(ctx)
	r.stop = stop
	if r.seen, err = watchBound(ictx, cp, ph.ns, r.tl.handler()); err != nil {
		r.close()
		return nil, err
	}
	if r.cpu0, err = sched.CPUSeconds(); err != nil {
		r.close()
		return nil, err
	}
	r.cost = startPhaseCost(ctx, cp, append(append(cp.Processes(), ph.others...), sched), sched)
	return r, nil
}

// end records the costs at the last binding and returns the scheduler's CPU
// seconds since the burst.
func (r *phaseRun) end(ctx context.Context, cp *harness.ControlPlane) (float64, error) {
	r.cost.end(ctx, cp)
	cpu1, err := r.sched.CPUSeconds()
	if err != nil {
		return 0, err
	}
	return cpu1 - r.cpu0, nil
}

// close stops the watch and the scheduler.
func (r *phaseRun) close() {
	r.stop()
	r.sched.Stop()
}
