package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// Preemption phase: every GPU of the cluster is held by priority-0 pods,
// already bound (as a running workload would be: created with their node
// and assignment): on each node GPUs 0-5 whole, GPUs 6 and 7 by two 50-unit
// shares each. Then preemptors of priority 1000 arrive from 16 clients:
// shares of 50 units, 80 units and whole GPUs, each needing one victim at
// best. Latency is creation -> bound seen, as for the main runs; victims per
// preemption = filler pods gone / preemptors.
const (
	fillerWhole   = 6 // whole-GPU fillers per node, on GPUs 0..5
	preemptorPrio = 1000
	// Labels of the phase's pods.
	fillerLabel    = "bench.gpuslice.io/filler"
	preemptorLabel = "bench.gpuslice.io/preemptor"
)

// preemptResult is the phase's figures.
type preemptResult struct {
	preemptors, victims int
	bound               int // preemptors bound (all but where -preempt-rates-cap ended the wait)
	p50, p99            time.Duration
	overcommitted       int
	cpu                 float64 // scheduler CPU seconds from the burst to the last binding
	clusterCPU          float64 // every process's CPU seconds over the phase (phaseCost)
	load                float64 // the machine's load average at the phase's end
}

func (r preemptResult) line() string {
	return fmt.Sprintf("preemption p99 %d ms from creation to binding, %.2f victims per preemption", r.p99.Milliseconds(), float64(r.victims)/float64(r.preemptors))
}

// runPreemption runs the phase with gpuslice-scheduler (binpack), after the
// stock baseline (-stock-preempt) and before the sustained-rate sweep
// (-preempt-rates, ratesweep.go) on the same cluster. Others are the
// processes besides the control plane whose CPU is counted (KWOK). The
// result is the run the -preempt-rate flags define (the preemption line).
func runPreemption(ctx context.Context, cp *harness.ControlPlane, o options, others ...*harness.Process) (preemptResult, []string, error) {
	var res preemptResult
	const ns = "preempt"
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return res, nil, fmt.Errorf("namespace: %w", err)
	}
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "bench-high"}, Value: preemptorPrio}
	if _, err := cp.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
		return res, nil, fmt.Errorf("priority class: %w", err)
	}
	start := time.Now()
	fillers, err := fill(ctx, cp, ns, o)
	if err != nil {
		return res, nil, err
	}
	fmt.Printf("== preemption: %d priority-0 pods hold every GPU (created bound and running in %.1fs)\n", fillers, time.Since(start).Seconds())
	ph := phase{ns: ns, priorityClass: pc.Name, fillers: fillers, others: others}
	var stock *preemptResult
	if o.stockPreempt { // the stock kube-scheduler on the same full cluster first (stockpreempt.go)
		if stock, err = runStockPreemption(ctx, cp, o, ph); err != nil {
			return res, nil, fmt.Errorf("stock: %w", err)
		}
	}
	if res, err = oursPreemption(ctx, cp, o, ph); err != nil {
		return res, nil, err
	}
	if stock != nil {
		fmt.Println(stockRatioLine(res, *stock))
	}
	if len(o.preemptRates) == 0 {
		return res, nil, nil // the pods go with the control plane (deleting 10,000 at once overloads it)
	}
	if err := restoreFillers(ctx, cp, o, ns, fillers); err != nil {
		return res, nil, err
	}
	sweep, err := runRateSweep(ctx, cp, o, ph)
	return res, sweep, err
}

// phase is the preemption phase's full cluster: the namespace, the
// preemptors' priority class, the filler count and the processes besides
// the control plane whose CPU is counted.
type phase struct {
	ns, priorityClass string
	fillers           int
	others            []*harness.Process
}

// oursPreemption runs gpuslice-scheduler (binpack) on the full cluster:
// start-up, a warm-up pod, then the preemptors as o says (profiles as
// o.profile and o.apiProfile say).
func oursPreemption(ctx context.Context, cp *harness.ControlPlane, o options, ph phase) (preemptResult, error) {
	var res preemptResult
	pprofArgs, err := o.profile.args()
	if err != nil {
		return res, err
	}
	so := harness.SchedulerOptions{SchedulerName: "gpuslice-preempt", GPUSlice: true, Args: "{placement: binpack, heartbeatTimeout: 1h}",
		ExtraArgs: append(pprofArgs, o.extraArgs...), StockQueueSort: o.stockQueueSort}
	run, err := startPhaseRun(ctx, cp, ph, o.scheduler, "warmup", so)
	if err != nil {
		return res, err
	}
	defer run.close()
	cpuProfiled := o.profile.start(ctx)
	apiProfiled := apiserverProfile(ctx, cp, o.apiProfile, o.profile.seconds)
	n := o.preemptors
	t0 := time.Now()
	arrivals := startPreemptors(ctx, cp, o, ph.ns, so.SchedulerName, ph.priorityClass)
	bound, err := waitPreemptors(ctx, run.seen, o, t0, run.sched) // fillers (f-) are not recorded
	if err != nil {
		return res, err
	}
	if res.cpu, err = run.end(ctx, cp); err != nil {
		return res, err
	}
	if err := o.profile.finish(ctx, cpuProfiled); err != nil {
		return res, err
	}
	if err := <-apiProfiled; err != nil {
		return res, err
	}
	created := arrivals.times()
	res.preemptors, res.bound = n, len(bound)
	res.p50, res.p99 = creationToBound(created, bound)
	res.clusterCPU = run.cost.totalCPU()
	if err := readBack(ctx, cp, ph, &res); err != nil {
		return res, err
	}
	fmt.Printf("preemption: %d of %d preemptors (%s) bound, %d victims, latency p50 %s ms p99 %s ms, over-committed %d, scheduler CPU %.1f s (%.0f ms per preemption), load %.1f\n",
		res.bound, n, arrivalText(o), res.victims, msText(res.p50, o.preemptCap), msText(res.p99, o.preemptCap), res.overcommitted, res.cpu, 1000*res.cpu/float64(n), res.load)
	fmt.Println(run.tl.split(created, bound))
	fmt.Println(run.cost.line(n))
	if m := schedulerMetrics(ctx, so.ExtraArgs); m != "" {
		fmt.Println(m)
	}
	return res, nil
}

// readBack counts the victims and fails on a GPU over-committed by the
// books, then records the load.
func readBack(ctx context.Context, cp *harness.ControlPlane, ph phase, res *preemptResult) error {
	left, err := cp.Client.CoreV1().Pods(ph.ns).List(ctx, metav1.ListOptions{LabelSelector: fillerLabel})
	if err != nil {
		return err
	}
	res.victims = ph.fillers - len(left.Items)
	books, err := harness.ReadBooks(ctx, cp, ph.ns, "kwok-")
	if err != nil {
		return err
	}
	res.overcommitted = len(books.Problems)
	if res.overcommitted > 0 {
		return fmt.Errorf("after preemption: %s", strings.Join(books.Problems, "; "))
	}
	res.load = loadAverage()
	return nil
}

// fill creates the bound priority-0 pods holding every GPU and returns how
// many there are.
func fill(ctx context.Context, cp *harness.ControlPlane, ns string, o options) (int, error) {
	fs, err := fillerPods(ns, o)
	if err != nil {
		return 0, err
	}
	err = parallel(32, len(fs), func(i int) error {
		_, err := cp.Client.CoreV1().Pods(ns).Create(ctx, fs[i], metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("filler pods: %w", err)
	}
	return len(fs), waitRunning(ctx, cp, ns, len(fs))
}

// fillerPods builds the priority-0 pods, bound, with their assignments.
func fillerPods(ns string, o options) ([]*corev1.Pod, error) {
	type filler struct {
		node string
		gpu  int
		a    api.GPUAssignment
	}
	var fs []filler
	for i := 0; i < o.nodes; i++ {
		node := fmt.Sprintf("kwok-%05d", i)
		for g := 0; g < o.gpus; g++ {
			uuid := fmt.Sprintf("GPU-%s-%d", node, g)
			if g < fillerWhole {
				fs = append(fs, filler{node, g, api.GPUAssignment{Index: int32(g), UUID: uuid, Units: api.DefaultUnitsPerGPU, MemoryBytes: 80 * harness.GiB, Exclusive: true}})
				continue
			}
			for range 2 {
				fs = append(fs, filler{node, g, api.GPUAssignment{Index: int32(g), UUID: uuid, Units: 50, MemoryBytes: 8 * harness.GiB}})
			}
		}
	}
	pods := make([]*corev1.Pod, 0, len(fs))
	for i, f := range fs {
		req := harness.GPURequest{Units: f.a.Units, Memory: f.a.MemoryBytes}
		if f.a.Exclusive {
			req = harness.GPURequest{GPUs: 1}
		}
		p := harness.Pod(ns, fmt.Sprintf("f-%06d", i), "none", req)
		a := api.Assignment{Version: api.AssignmentVersion, Node: f.node, Containers: []api.ContainerAssignment{{Name: "main", GPUs: []api.GPUAssignment{f.a}}}}
		raw, err := a.Marshal()
		if err != nil {
			return nil, err
		}
		p.Spec.NodeName = f.node
		p.Labels = map[string]string{fillerLabel: "true"}
		p.Annotations = map[string]string{api.AnnotationAssignment: string(raw)}
		pods = append(pods, p)
	}
	return pods, nil
}

// waitRunning waits until KWOK has reported every filler pod running, as a
// running workload's pods would be: otherwise its status writes for the
// fillers still queued would land in the phase and compete with it.
func waitRunning(ctx context.Context, cp *harness.ControlPlane, ns string, n int) error {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	running := 0
	err := harness.WaitFor(wctx, time.Second, func() (bool, error) {
		l, err := cp.Client.CoreV1().Pods(ns).List(wctx, metav1.ListOptions{LabelSelector: fillerLabel, FieldSelector: "status.phase=Running", ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		running = len(l.Items)
		return running >= n, nil
	})
	if err != nil {
		return fmt.Errorf("KWOK reported %d of %d filler pods running: %w", running, n, err)
	}
	return nil
}

// arrive calls create for 0..n-1: all at once from clients workers (rate
// 0), or one every 1/rate seconds, each in its own goroutine (a slow API
// call does not delay the next arrival).
func arrive(ctx context.Context, clients, n int, rate float64, create func(i int) error) error {
	if rate <= 0 {
		return parallel(clients, n, create)
	}
	start := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; i < n; i++ {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(at)):
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = create(i)
		}()
	}
	return nil
}
