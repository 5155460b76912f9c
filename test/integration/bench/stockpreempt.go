package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// The stock baseline of the preemption phase (-stock-preempt, on by
// default): the stock kube-scheduler's DefaultPreemption on the same full
// cluster, for the same preemptors arriving the same way, latency measured
// the same way, before gpuslice-scheduler's run.
//
// What plain extended resources can express: a node-level count of whole
// GPUs (gpuslice.io/gpu) and node-level pools of units and memory, not
// which GPU a pod holds. With the nodes' usual advertisement (8 GPUs, 800
// units) the fillers would leave 2 whole GPUs and 600 units free per node
// in stock's view, and no preemptor would need a victim; so for the stock
// run every node advertises the fillers' static split: 6 whole GPUs, and
// 200 units and 160 GiB of memory (GPUs 6 and 7, shared). The stock
// scheduler then needs a whole-GPU victim for a whole GPU, and 50 units of
// share victims per 50 units; but it cannot tell that an 80-unit preemptor
// needs its two 50-unit victims on one GPU, nor use a whole GPU's victim
// for a share. The victims it chose are read back with our books
// (stockBooks): preemptors that no GPU of their node can hold are
// reported, not failed (stock knows no GPUs). Afterwards the nodes'
// advertisement, the victims (same names, nodes and assignments) and
// KWOK's running status are restored, so gpuslice-scheduler starts from
// the same full cluster.

// stockPreemptName is the stock run's scheduler profile (and process) name.
const stockPreemptName = "stock-preempt"

// nodeGPUMemory is each KWOK GPU's memory (createNodes, fillerPods).
const nodeGPUMemory = 80 * harness.GiB

// runStockPreemption runs the stock baseline on the full cluster and puts
// the cluster back as it found it.
func runStockPreemption(ctx context.Context, cp *harness.ControlPlane, o options, ph phase) (*preemptResult, error) {
	start := time.Now()
	if err := advertise(ctx, cp, o, stockSplit(o)); err != nil {
		return nil, err
	}
	res, err := stockBurst(ctx, cp, o, ph)
	if err != nil {
		return nil, err
	}
	if err := restoreFillers(ctx, cp, o, ph.ns, ph.fillers); err != nil {
		return nil, err
	}
	if err := advertise(ctx, cp, o, fullAdvertisement(o)); err != nil {
		return nil, err
	}
	fmt.Printf("stock preemption run: %.0f s in all (advertising the split, start-up, the phase, putting the %d victims back until KWOK reports them running)\n",
		time.Since(start).Seconds(), res.victims)
	return res, nil
}

// stockBurst is the measured part: kube-scheduler starts, binds a warm-up
// pod, then the preemptors arrive.
func stockBurst(ctx context.Context, cp *harness.ControlPlane, o options, ph phase) (*preemptResult, error) {
	bins, err := harness.FindBinaries()
	if err != nil {
		return nil, err
	}
	so := harness.SchedulerOptions{SchedulerName: stockPreemptName}
	run, err := startPhaseRun(ctx, cp, ph, bins.Path("kube-scheduler"), "stock-warmup", so)
	if err != nil {
		return nil, err
	}
	defer run.close()
	n := o.preemptors
	t0 := time.Now()
	arrivals := startPreemptors(ctx, cp, o, ph.ns, so.SchedulerName, ph.priorityClass)
	bound, err := waitPreemptors(ctx, run.seen, o, t0, run.sched)
	if err != nil {
		return nil, err
	}
	cpu, err := run.end(ctx, cp)
	if err != nil {
		return nil, err
	}
	created := arrivals.times()
	res := &preemptResult{preemptors: n, bound: len(bound), cpu: cpu, clusterCPU: run.cost.totalCPU()}
	res.p50, res.p99 = creationToBound(created, bound)
	b, err := stockBooks(ctx, cp, o, ph.ns, ph.fillers)
	if err != nil {
		return nil, err
	}
	res.victims, res.overcommitted, res.load = b.victims, len(b.misfits), loadAverage()
	fmt.Printf("stock preemption: %d of %d preemptors (%s) bound, %d victims (%d whole GPUs, %d shares), latency p50 %s ms p99 %s ms, "+
		"over-committed by our books %d (preemptors no GPU of their node can hold), scheduler CPU %.1f s (%.0f ms per preemption), load %.1f\n",
		res.bound, n, arrivalText(o), b.victims, b.wholeVictims, b.victims-b.wholeVictims, msText(res.p50, o.preemptCap), msText(res.p99, o.preemptCap),
		res.overcommitted, res.cpu, 1000*res.cpu/float64(n), res.load)
	if len(b.misfits) > 0 {
		fmt.Printf("stock preemption: e.g. %s\n", strings.Join(b.misfits[:min(3, len(b.misfits))], "; "))
	}
	fmt.Printf("stock preemption: plain extended resources, each node advertising the fillers' split (%s): node-level sums, not which GPU\n", resourceText(stockSplit(o)))
	fmt.Println("stock " + run.tl.split(created, bound))
	fmt.Println("stock " + strings.ReplaceAll(run.cost.line(n), "\n", "\nstock "))
	return res, nil
}

// stockSplit is what a node advertises for the stock run: its whole-GPU
// fillers' GPUs as whole GPUs, the shared GPUs as units and memory.
func stockSplit(o options) corev1.ResourceList {
	shared := int64(o.gpus - fillerWhole)
	return corev1.ResourceList{
		api.ResourceGPU:    *resource.NewQuantity(fillerWhole, resource.DecimalSI),
		api.ResourceUnits:  *resource.NewQuantity(shared*api.DefaultUnitsPerGPU, resource.DecimalSI),
		api.ResourceMemory: *resource.NewQuantity(shared*nodeGPUMemory, resource.BinarySI),
	}
}

// fullAdvertisement is the nodes' usual advertisement (createNodes).
func fullAdvertisement(o options) corev1.ResourceList {
	all := harness.NodeSpec{GPUs: o.gpus, GPUMemory: nodeGPUMemory, Extended: true}.Node().Status.Capacity
	out := corev1.ResourceList{}
	for name, q := range all {
		if api.IsGPUSliceResource(name) {
			out[name] = q
		}
	}
	return out
}

// advertise sets every node's gpuslice.io extended resources (capacity and
// allocatable; KWOK keeps them).
func advertise(ctx context.Context, cp *harness.ControlPlane, o options, rl corev1.ResourceList) error {
	raw, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": rl, "allocatable": rl}})
	if err != nil {
		return err
	}
	err = parallel(32, o.nodes, func(i int) error {
		_, err := cp.Client.CoreV1().Nodes().PatchStatus(ctx, fmt.Sprintf("kwok-%05d", i), raw)
		return err
	})
	if err != nil {
		return fmt.Errorf("node extended resources: %w", err)
	}
	return nil
}

func resourceText(rl corev1.ResourceList) string {
	var parts []string
	for name, q := range rl {
		parts = append(parts, fmt.Sprintf("%s %s", name, q.String()))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// totalCPU is every counted process's CPU seconds over the phase, the
// bench's own included.
func (pc *phaseCost) totalCPU() float64 {
	t := pc.self1 - pc.self0
	for _, p := range pc.procs {
		t += pc.cpu1[p.Name] - pc.cpu0[p.Name]
	}
	return t
}

// stockRatioLine compares gpuslice-scheduler's run with the stock one.
func stockRatioLine(ours, stock preemptResult) string {
	per := func(r preemptResult, s float64) float64 { return 1000 * s / float64(r.preemptors) }
	return fmt.Sprintf("preemption gpuslice vs stock kube-scheduler: p50 %d vs %d ms (ratio %.2f), p99 %d vs %d ms (ratio %.2f), "+
		"victims per preemption %.2f vs %.2f, scheduler CPU per preemption %.0f vs %.0f ms, cluster CPU per preemptor %.0f vs %.0f ms",
		ours.p50.Milliseconds(), stock.p50.Milliseconds(), ratio(ours.p50, stock.p50),
		ours.p99.Milliseconds(), stock.p99.Milliseconds(), ratio(ours.p99, stock.p99),
		float64(ours.victims)/float64(ours.preemptors), float64(stock.victims)/float64(stock.preemptors),
		per(ours, ours.cpu), per(stock, stock.cpu), per(ours, ours.clusterCPU), per(stock, stock.clusterCPU))
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}
