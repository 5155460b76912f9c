package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// podMix returns the i-th pod's request: the same sequence for every run.
func podMix(seed uint64, n int) []harness.GPURequest {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]harness.GPURequest, n)
	for i := range out {
		switch x := r.IntN(20); {
		case x < 3:
			out[i] = harness.GPURequest{GPUs: 1}
		case x < 4:
			out[i] = harness.GPURequest{GPUs: 2}
		default:
			out[i] = harness.GPURequest{Units: int64(10 * (1 + r.IntN(5))), Memory: int64(1+r.IntN(8)) * 4 * harness.GiB}
		}
	}
	return out
}

// workload is what one run schedules: n pods, the i-th built by pod (named
// p-<i>), after setup (untimed: e.g. the pods' ResourceClaims), and what
// cleanup removes once the pods are gone.
type workload struct {
	n       int
	pod     func(ns, scheduler string, i int) *corev1.Pod
	setup   func(ctx context.Context, ns string) error
	cleanup func(ctx context.Context, ns string) error
	// books, where set, reads the run's placement back (a printed note).
	books func(ctx context.Context, ns string) (string, error)
	// writes: count the API server's writes from the first pod created
	// to the last bound (apiwrites.go; printed per pod).
	writes bool
}

// mixWorkload is the pod mix of podMix as plain extended resources.
func mixWorkload(n int) workload {
	mix := podMix(7, n)
	return workload{n: n, pod: func(ns, scheduler string, i int) *corev1.Pod {
		return harness.Pod(ns, fmt.Sprintf("p-%05d", i), scheduler, mix[i])
	}}
}

// runOne starts one scheduler, creates the pods in a fresh namespace, waits
// until all are bound, and reads the books back.
func runOne(ctx context.Context, cp *harness.ControlPlane, o options, bin, name string, so harness.SchedulerOptions) (result, error) {
	return runWorkload(ctx, cp, bin, name, so, o.clients, mixWorkload(o.pods))
}

// runWorkload is runOne for any workload.
func runWorkload(ctx context.Context, cp *harness.ControlPlane, bin, name string, so harness.SchedulerOptions, clients int, w workload) (result, error) {
	res := result{name: name}
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("namespace: %w", err)
	}
	sched, err := cp.StartScheduler(ctx, bin, name, so)
	if err != nil {
		return res, err
	}
	defer sched.Stop()
	if w.setup != nil {
		if err := w.setup(ctx, name); err != nil {
			return res, err
		}
	}
	if err := warmUp(ctx, cp, name, so.SchedulerName, sched); err != nil {
		return res, err
	}
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	seen, err := watchBound(ictx, cp, name)
	if err != nil {
		return res, err
	}
	var writes0 apiWrites
	if w.writes {
		if writes0, err = readAPIWrites(ctx, cp); err != nil {
			return res, err
		}
	}
	created := make([]time.Time, w.n)
	var mu sync.Mutex
	t0 := time.Now()
	go func() {
		_ = parallel(clients, w.n, func(i int) error {
			p := w.pod(name, so.SchedulerName, i)
			mu.Lock()
			created[i] = time.Now()
			mu.Unlock()
			_, err := cp.Client.CoreV1().Pods(name).Create(ctx, p, metav1.CreateOptions{})
			return err
		})
	}()
	bound, err := waitBound(ctx, seen, w.n, sched)
	if err != nil {
		return res, err
	}
	if w.writes {
		writes1, err := readAPIWrites(ctx, cp)
		if err != nil {
			return res, err
		}
		res.writes = writes1.perPod(writes0, w.n)
	}
	if res.cpu, err = sched.CPUSeconds(); err != nil {
		return res, err
	}
	res.load = loadAverage()
	mu.Lock()
	res.bound, res.podsPerSec, res.p50, res.p99 = latencies(created, bound, t0)
	mu.Unlock()
	if w.books != nil { // the workload's own books (claims: read back from their allocations)
		if res.note, err = w.books(ctx, name); err != nil {
			return res, err
		}
	} else if so.GPUSlice {
		if res.books, err = harness.ReadBooks(ctx, cp, name, "kwok-"); err != nil {
			return res, err
		}
	}
	if err := clearPods(ctx, cp, name); err != nil {
		return res, err
	}
	if w.cleanup != nil {
		return res, w.cleanup(ctx, name)
	}
	return res, nil
}

// latencies computes throughput and latency percentiles from creation and
// binding times.
func latencies(created []time.Time, bound map[int]time.Time, t0 time.Time) (n int, perSec float64, p50, p99 time.Duration) {
	lat := make([]time.Duration, 0, len(bound))
	var last time.Time
	for i, t := range bound {
		lat = append(lat, t.Sub(created[i]))
		if t.After(last) {
			last = t
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return len(bound), float64(len(bound)) / last.Sub(t0).Seconds(), lat[len(lat)/2], lat[len(lat)*99/100]
}

// clearPods deletes the run's pods so the next run starts from empty GPUs.
func clearPods(ctx context.Context, cp *harness.ControlPlane, ns string) error {
	zero := int64(0)
	pods := cp.Client.CoreV1().Pods(ns)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("delete pods: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	return harness.WaitFor(wctx, time.Second, func() (bool, error) {
		l, err := pods.List(wctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(l.Items) == 0, nil
	})
}

// warmUp waits until the scheduler binds a first pod, so the measurement
// covers scheduling, not start-up (informers listing thousands of nodes).
func warmUp(ctx context.Context, cp *harness.ControlPlane, ns, scheduler string, sched *harness.Process) error {
	p := harness.Pod(ns, "warmup", scheduler, harness.GPURequest{Units: 10})
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("warm-up pod: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err := harness.WaitFor(wctx, 100*time.Millisecond, func() (bool, error) {
		got, err := cp.Client.CoreV1().Pods(ns).Get(wctx, "warmup", metav1.GetOptions{})
		return err == nil && got.Spec.NodeName != "", nil
	})
	if err != nil {
		return fmt.Errorf("scheduler %s never bound the warm-up pod: %w\n%s", scheduler, err, sched.Tail())
	}
	return nil
}

// boundTimes records, per pod index, when the informer first saw the pod bound.
type boundTimes struct {
	mu sync.Mutex
	at map[int]time.Time
}

func (b *boundTimes) see(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	var i int
	if _, err := fmt.Sscanf(p.Name, "p-%d", &i); err != nil {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, seen := b.at[i]; !seen {
		b.at[i] = now
	}
}

func (b *boundTimes) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.at)
}

// watchBound starts an informer on the namespace's pods recording bindings
// (and passing every event to the extra handlers).
func watchBound(ctx context.Context, cp *harness.ControlPlane, ns string, extra ...cache.ResourceEventHandler) (*boundTimes, error) {
	b := &boundTimes{at: map[int]time.Time{}}
	f := informers.NewSharedInformerFactoryWithOptions(cp.Client, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    b.see,
		UpdateFunc: func(_, obj any) { b.see(obj) },
	}); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	for _, h := range extra {
		if _, err := inf.AddEventHandler(h); err != nil {
			return nil, fmt.Errorf("pod informer: %w", err)
		}
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("pod informer did not sync")
	}
	return b, nil
}

// waitBound waits until n pods are bound and returns the binding times.
func waitBound(ctx context.Context, b *boundTimes, n int, sched *harness.Process) (map[int]time.Time, error) {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := harness.WaitFor(wctx, 50*time.Millisecond, func() (bool, error) { return b.count() >= n, nil }); err != nil {
		return nil, fmt.Errorf("only %d of %d pods bound: %w; scheduler log:\n%s", b.count(), n, err, sched.Tail())
	}
	return b.snapshot(), nil
}

// snapshot is a copy of the bound times so far.
func (b *boundTimes) snapshot() map[int]time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.at)
}

// loadAverage is the machine's 1-minute load average (0 if unreadable): the
// box is shared, so every figure is printed with it.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	if _, err := fmt.Sscan(string(b), &l); err != nil {
		return 0
	}
	return l
}
