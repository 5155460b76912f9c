package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

type options struct {
	scheduler         string
	nodes, pods, gpus int
	clients           int
	rounds            int
	keep              bool
	extraArgs         []string
	// draPods > 0 runs the DRA part (dra.go) at this scale, with that many
	// pods per run.
	draPods, draRounds int
	// The DRA preemption phase (drapreempt.go, after the DRA part): nodes
	// filled, preemptors, the stock kube-scheduler's wait (0 nodes: none).
	draPreemptNodes, draPreemptors int
	draStockWait                   time.Duration
	// preemptNodes: the scale whose cluster also runs the preemption
	// phase (0: none), with preemptors pods.
	preemptNodes, preemptors int
	// preemptRate: preemptors created per second (0: all at once, a burst
	// from clients creators).
	preemptRate float64
	// preemptRates: the sustained-rate sweep after the phase's run
	// (ratesweep.go), ascending; preemptRatesCap: each sweep run's wait
	// after its last arrival. preemptCap: the wait's cap of the run at
	// hand (0: every preemptor must bind, as in the phase's run).
	preemptRates                []float64
	preemptRatesCap, preemptCap time.Duration
	// stockPreempt: the stock kube-scheduler's preemption on the same full
	// cluster first, for a baseline (stockpreempt.go).
	stockPreempt bool
	// stockQueueSort: gpuslice-scheduler keeps PrioritySort (harness.SchedulerOptions).
	stockQueueSort bool
	// profile: a CPU profile of the preemption phase (profile.go).
	profile *cpuProfile
	// draProfile: a CPU profile of the dra-gpuslice run (-dra-profile).
	draProfile *cpuProfile
	// draPreemptProfile: a CPU profile of the DRA preemption phase's
	// gpuslice-scheduler (-dra-preempt-profile).
	draPreemptProfile *cpuProfile
	// auditWrites: the API server logs writes; the preemption phase counts them by client.
	auditWrites bool
	// apiProfile: a CPU profile of kube-apiserver over the preemption phase.
	apiProfile string
	// draAPIProfile: CPU profiles of kube-apiserver over the DRA runs (dra.go).
	draAPIProfile string
	// draPreemptAPIProfile: a CPU profile of kube-apiserver over the DRA
	// preemption phase's gpuslice-scheduler run (drapreempt.go).
	draPreemptAPIProfile string
}

// result is one scheduler's run.
type result struct {
	name       string
	bound      int
	podsPerSec float64
	p50, p99   time.Duration
	cpu        float64 // scheduler CPU seconds, start-up included
	load       float64 // the machine's load average when the run ended
	books      *harness.Books
	note       string // placement read back where there are no per-GPU books
	writes     string // the API server's writes per pod (workload.writes)
}

// runScale brings up a cluster of o.nodes KWOK nodes and runs stock, ours
// (binpack) and ours (spread) on the same pods, then the preemption phase
// at o.preemptNodes and the DRA part where o.draPods > 0; it returns the
// summary line and the lines that go before it (preemption, DRA).
func runScale(ctx context.Context, o options) (string, []string, error) {
	bins, err := harness.FindBinaries()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "gpuslice-bench-")
	if err != nil {
		return "", nil, fmt.Errorf("temp dir: %w", err)
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	cp, err := harness.StartControlPlaneWith(ctx, bins, dir, harness.Options{AuditWrites: o.auditWrites})
	if err != nil {
		return "", nil, err
	}
	defer cp.Stop()
	if err := cp.InstallCRDs(ctx); err != nil {
		return "", nil, err
	}
	kwok, err := cp.StartKwok(bins)
	if err != nil {
		return "", nil, err
	}
	defer kwok.Stop()
	start := time.Now()
	if err := createNodes(ctx, cp, o); err != nil {
		return "", nil, err
	}
	fmt.Printf("== %d nodes x %d GPUs ready in %.1fs (KWOK), %d pods per run\n", o.nodes, o.gpus, time.Since(start).Seconds(), o.pods)
	var stock, ours []result
	for r := 0; r < max(o.rounds, 1); r++ { // alternate, so load from elsewhere hits both
		sr, err := runOne(ctx, cp, o, bins.Path("kube-scheduler"), fmt.Sprintf("stock-%d", r), harness.SchedulerOptions{SchedulerName: fmt.Sprintf("stock-%d", r)})
		if err != nil {
			return "", nil, err
		}
		printResult(sr)
		name := fmt.Sprintf("gpuslice-binpack-%d", r)
		gr, err := runOne(ctx, cp, o, o.scheduler, name, harness.SchedulerOptions{SchedulerName: name, GPUSlice: true, StockQueueSort: o.stockQueueSort,
			Args: "{placement: binpack, heartbeatTimeout: 1h}", ExtraArgs: o.extraArgs})
		if err != nil {
			return "", nil, err
		}
		printResult(gr)
		stock, ours = append(stock, sr), append(ours, gr)
	}
	spread, err := runOne(ctx, cp, o, o.scheduler, "gpuslice-spread", harness.SchedulerOptions{SchedulerName: "gpuslice-spread", GPUSlice: true, StockQueueSort: o.stockQueueSort, Args: "{placement: spread, heartbeatTimeout: 1h}"})
	if err != nil {
		return "", nil, err
	}
	printResult(spread)
	var more []string
	s, g := mean(stock), mean(ours)
	fmt.Printf("mean over %d rounds: stock %.1f pods/s (CPU %.1f s), gpuslice binpack %.1f pods/s (CPU %.1f s)\n", len(stock), s.podsPerSec, s.cpu, g.podsPerSec, g.cpu)
	if o.draPods > 0 {
		draLine, err := runDRA(ctx, cp, o, bins.Path("kube-scheduler"))
		if err != nil {
			return "", nil, fmt.Errorf("DRA: %w", err)
		}
		more = append(more, draLine...)
	}
	if o.nodes == o.preemptNodes { // last: its 10,000-odd pods stay until the control plane stops
		pr, sweep, err := runPreemption(ctx, cp, o, kwok)
		if err != nil {
			return "", nil, fmt.Errorf("preemption: %w", err)
		}
		more = append(append([]string{pr.line()}, sweep...), more...)
	}
	return fmt.Sprintf("gpuslice %.1f pods/s, stock %.1f pods/s, ratio %.2f, nodes %d, pods %d, p99 latency %d ms",
		g.podsPerSec, s.podsPerSec, g.podsPerSec/s.podsPerSec, o.nodes, o.pods, g.p99.Milliseconds()), more, nil
}

// mean averages throughput, CPU and p99 latency over rounds.
func mean(rs []result) result {
	var m result
	for _, r := range rs {
		m.podsPerSec += r.podsPerSec / float64(len(rs))
		m.cpu += r.cpu / float64(len(rs))
		m.p99 += r.p99 / time.Duration(len(rs))
	}
	return m
}

func printResult(r result) {
	fmt.Printf("%-17s %7.1f pods/s  bound %d  latency p50 %5d ms p99 %5d ms  scheduler CPU %5.1f s  load %4.1f", r.name, r.podsPerSec, r.bound, r.p50.Milliseconds(), r.p99.Milliseconds(), r.cpu, r.load)
	if r.books != nil {
		fmt.Printf("  | GPUs used %d, partly used %d (fragmentation %.3f), node load stddev %.3f, over-committed %d",
			r.books.UsedGPUs, r.books.PartialGPUs, r.books.Fragmentation(), r.books.LoadStddev(), len(r.books.Problems))
	} else if r.note != "" {
		fmt.Print(r.note)
	} else {
		fmt.Printf("  | no per-GPU books (plain extended resources)")
	}
	fmt.Println()
	if r.writes != "" {
		fmt.Println("  " + r.writes)
	}
}

// createNodes creates KWOK-managed nodes advertising the resources as plain
// extended resources (for the stock scheduler) plus their GPUNode rows, and
// waits until KWOK has made them Ready.
func createNodes(ctx context.Context, cp *harness.ControlPlane, o options) error {
	now := time.Now()
	err := parallel(32, o.nodes, func(i int) error {
		s := harness.NodeSpec{Name: fmt.Sprintf("kwok-%05d", i), GPUs: o.gpus, GPUMemory: 80 * harness.GiB, Kwok: true, Extended: true}
		if err := cp.CreateNode(ctx, s, now); err != nil {
			return err
		}
		if err := harness.PutGPUNode(ctx, cp.GPUNodes, s.GPUNode(now)); err != nil {
			return err
		}
		return harness.PutLease(ctx, cp.Client, s.Name, now, time.Hour)
	})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	return harness.WaitFor(wctx, time.Second, func() (bool, error) {
		nodes, err := cp.Client.CoreV1().Nodes().List(wctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		klog.FromContext(ctx).V(1).Info("waiting for KWOK", "ready", ready, "nodes", o.nodes)
		return ready >= o.nodes, nil
	})
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(workers, n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var first error
loop:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case first = <-errs:
			break loop
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	if first == nil {
		first = <-errs
	}
	return first
}
