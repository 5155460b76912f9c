package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// DRA preemption (issue 32): on the DRA part's cluster, the first
// o.draPreemptNodes nodes (labelled) are made full: every GPU holds two
// priority-0 shares of 50 units and 8 GiB, each a bound pod with its own
// ResourceClaim allocated there (as a running workload's claims would be).
// Then o.draPreemptors priority-1000 pods, each with a claim of 50 units and
// 8 GiB on those nodes (one victim at best), arrive from o.clients creators:
// first for the stock kube-scheduler (which cannot preempt for claims: how
// many it binds within o.draStockWait), then, the stock's preemptors gone,
// the same for gpuslice-scheduler, every one of which must bind. Nothing
// runs the resource claim controller: gpuslice-scheduler deallocates its
// victims' claims itself. The line: "dra preemption p99 <ms> ms from
// creation to binding, <v> victims per preemption, stock bound <n>/<m>".
const draPreemptLabel = "bench.gpuslice.io/dra-preempt"

func runDRAPreemption(ctx context.Context, cp *harness.ControlPlane, o options, stock string) (string, error) {
	const ns = "dra-preempt"
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("namespace: %w", err)
	}
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "bench-dra-high"}, Value: preemptorPrio}
	if _, err := cp.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("priority class: %w", err)
	}
	nodes := min(o.draPreemptNodes, o.nodes)
	start := time.Now()
	fillers, err := fillClaims(ctx, cp, ns, nodes, o.gpus)
	if err != nil {
		return "", err
	}
	fmt.Printf("== dra preemption: %d priority-0 claim pods hold every GPU of %d nodes (created bound, allocated and running in %.1fs)\n",
		fillers, nodes, time.Since(start).Seconds())
	n := o.draPreemptors
	stockBound, err := draPreemptRun(ctx, cp, ns, stock, "stock-dra-preempt", harness.SchedulerOptions{SchedulerName: "stock-dra-preempt"}, n, o.clients, o.draStockWait, nil, "")
	if err != nil {
		return "", fmt.Errorf("stock: %w", err)
	}
	fmt.Printf("stock dra preemption: %d of %d preemptors bound within %s\n", len(stockBound.bound), n, o.draStockWait)
	if err := removePreemptors(ctx, cp, ns); err != nil {
		return "", err
	}
	pprofArgs, err := o.draPreemptProfile.args()
	if err != nil {
		return "", err
	}
	so := harness.SchedulerOptions{SchedulerName: "gpuslice-dra-preempt", GPUSlice: true, StockQueueSort: o.stockQueueSort,
		Args: "{placement: binpack, heartbeatTimeout: 1h}", ExtraArgs: append(pprofArgs, o.extraArgs...)}
	ours, err := draPreemptRun(ctx, cp, ns, o.scheduler, "gpuslice-dra-preempt", so, n, o.clients, 0, o.draPreemptProfile, o.draPreemptAPIProfile)
	if err != nil {
		return "", err
	}
	left, err := cp.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: fillerLabel})
	if err != nil {
		return "", err
	}
	victims := fillers - len(left.Items)
	note, err := (&resourceClaims{cp: cp, ns: ns}).books(ctx)
	if err != nil {
		return "", fmt.Errorf("after preemption: %w", err)
	}
	p50, p99 := creationToBound(ours.created, ours.bound)
	fmt.Printf("dra preemption: %d of %d preemptors bound, %d victims, latency p50 %d ms p99 %d ms, scheduler CPU %.1f s (%.0f ms per preemption), load %.1f%s\n",
		len(ours.bound), n, victims, p50.Milliseconds(), p99.Milliseconds(), ours.cpu, 1000*ours.cpu/float64(n), loadAverage(), note)
	return fmt.Sprintf("dra preemption p99 %d ms from creation to binding, %.2f victims per preemption, stock bound %d/%d",
		p99.Milliseconds(), float64(victims)/float64(n), len(stockBound.bound), n), nil
}

// fillClaims creates, per GPU of the first nodes nodes, two priority-0 pods
// bound there, each with a claim of its own (controlled by the pod, as one
// made from a template is) of 50 units and 8 GiB allocated on that GPU and
// reserved for it, and labels those nodes; it returns the pod count.
func fillClaims(ctx context.Context, cp *harness.ControlPlane, ns string, nodes, gpus int) (int, error) {
	err := parallel(32, nodes, func(i int) error {
		patch := []byte(`{"metadata":{"labels":{"` + draPreemptLabel + `":"true"}}}`)
		_, err := cp.Client.CoreV1().Nodes().Patch(ctx, fmt.Sprintf("kwok-%05d", i), types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("label nodes: %w", err)
	}
	total := nodes * gpus * 2
	err = parallel(32, total, func(k int) error {
		node, gpu := fmt.Sprintf("kwok-%05d", k/(gpus*2)), (k/2)%gpus
		name := fmt.Sprintf("f-%06d", k)
		req := harness.GPURequest{Units: 50, Memory: 8 * harness.GiB}
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: harness.DRAClaimSpec(req)}
		c, err := cp.Client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("claim %s: %w", name, err)
		}
		p := harness.DRAPod(ns, name, "none", name, false)
		p.Spec.NodeName = node
		p.Labels = map[string]string{fillerLabel: "true"}
		p, err = cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("pod %s: %w", name, err)
		}
		// The pod's own claim, as the resource claim controller makes one
		// from a pod's template: controlled by its pod.
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
		if c, err = cp.Client.ResourceV1().ResourceClaims(ns).Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("claim %s owner: %w", name, err)
		}
		c.Status.Allocation = &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: harness.DRARequest, Driver: harness.DRADriver, Pool: node, Device: fmt.Sprintf("gpu-%d", gpu),
				ShareID: ptr.To(uuid.NewUUID()),
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
					harness.DRAUnits: *resource.NewQuantity(50, resource.DecimalSI), harness.DRAMemory: *resource.NewQuantity(8*harness.GiB, resource.BinarySI)},
			}}},
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}},
		}
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
		if _, err := cp.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("claim %s status: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return total, waitRunning(ctx, cp, ns, total)
}

// draPreemptResult is one scheduler's run: creation and binding times.
type draPreemptResult struct {
	created []time.Time
	bound   map[int]time.Time
	cpu     float64
}

// draPreemptRun starts the scheduler (warm-up pod first), creates n
// preemptor claims and pods (p-00000...) for it and waits until all are
// bound, or, with wait > 0, for wait and returns those bound by then. When
// all must bind it prints the run's steps (timeline, claimTimeline) and
// its CPU by process, and takes prof (-dra-preempt-profile) from the
// first preemptor on, and a kube-apiserver profile to apiProf for as long
// (-dra-preempt-apiserver-profile).
func draPreemptRun(ctx context.Context, cp *harness.ControlPlane, ns, bin, name string, so harness.SchedulerOptions, n, clients int,
	wait time.Duration, prof *cpuProfile, apiProf string) (draPreemptResult, error) {
	var res draPreemptResult
	sched, err := cp.StartScheduler(ctx, bin, name, so)
	if err != nil {
		return res, err
	}
	defer sched.Stop()
	if err := warmUpPreempt(ctx, cp, ns, name+"-warmup", so.SchedulerName, sched); err != nil {
		return res, err
	}
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	tl := newTimeline()
	seen, err := watchBound(ictx, cp, ns, tl.handler())
	if err != nil {
		return res, err
	}
	ctl, err := watchClaims(ictx, cp, ns)
	if err != nil {
		return res, err
	}
	if err := preemptorClaims(ctx, cp, ns, n); err != nil {
		return res, err
	}
	res.created = make([]time.Time, n)
	cost := startPhaseCost(ctx, cp, append(cp.Processes(), sched), sched)
	profiled := prof.start(ctx)
	apiProfiled := apiserverProfile(ctx, cp, apiProf, prof.secondsOr(10))
	createdAt := createDRAPreemptors(ctx, cp, ns, so.SchedulerName, clients, res.created)
	if wait > 0 {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(wait):
		}
		<-createdAt
		res.bound = seen.snapshot()
	} else {
		if res.bound, err = waitBound(ctx, seen, n, sched); err != nil {
			return res, err
		}
		<-createdAt
		cost.end(ctx, cp)
		fmt.Println("dra " + tl.split(res.created, res.bound))
		fmt.Println(ctl.split(tl, res.bound))
		fmt.Println("dra " + cost.line(n))
	}
	if err := prof.finish(ctx, profiled); err != nil {
		return res, err
	}
	if err := <-apiProfiled; err != nil {
		return res, err
	}
	res.cpu, err = sched.CPUSeconds()
	if m := schedulerMetrics(ctx, so.ExtraArgs); m != "" {
		fmt.Println(m)
	}
	return res, err
}

// createDRAPreemptors creates the preemptor pods (one per claim, p-00000...,
// on the full nodes, priority bench-dra-high) from clients creators in the
// background, recording each one's creation time in created; the channel
// closes once all are created.
func createDRAPreemptors(ctx context.Context, cp *harness.ControlPlane, ns, schedulerName string, clients int, created []time.Time) <-chan struct{} {
	createdAt := make(chan struct{})
	go func() {
		defer close(createdAt)
		_ = parallel(clients, len(created), func(i int) error {
			p := harness.DRAPod(ns, fmt.Sprintf("p-%05d", i), schedulerName, fmt.Sprintf("p-%05d", i), false)
			p.Labels = map[string]string{preemptorLabel: "true"}
			p.Spec.NodeSelector = map[string]string{draPreemptLabel: "true"}
			p.Spec.PriorityClassName, p.Spec.Priority = "bench-dra-high", ptr.To[int32](preemptorPrio)
			created[i] = time.Now()
			_, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			return err
		})
	}()
	return createdAt
}

// preemptorClaims creates the n preemptors' claims (p-00000...): a share
// of 50 units and 8 GiB each.
func preemptorClaims(ctx context.Context, cp *harness.ControlPlane, ns string, n int) error {
	claims := cp.Client.ResourceV1().ResourceClaims(ns)
	err := parallel(16, n, func(i int) error {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p-%05d", i)},
			Spec: harness.DRAClaimSpec(harness.GPURequest{Units: 50, Memory: 8 * harness.GiB})}
		_, err := claims.Create(ctx, c, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("preemptor claims: %w", err)
	}
	return nil
}

// removePreemptors deletes the preemptor pods (and warm-up pods) and the
// preemptors' claims.
func removePreemptors(ctx context.Context, cp *harness.ControlPlane, ns string) error {
	zero := int64(0)
	sel := metav1.ListOptions{LabelSelector: preemptorLabel}
	if err := cp.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, sel); err != nil {
		return fmt.Errorf("delete preemptors: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	err := harness.WaitFor(wctx, 500*time.Millisecond, func() (bool, error) {
		l, err := cp.Client.CoreV1().Pods(ns).List(wctx, sel)
		return err == nil && len(l.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("preemptors not gone: %w", err)
	}
	l, err := cp.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	rc := cp.Client.ResourceV1().ResourceClaims(ns)
	for _, c := range l.Items {
		if len(c.Name) < 2 || c.Name[:2] != "p-" {
			continue
		}
		_, _ = rc.Patch(ctx, c.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		if err := rc.Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("claim %s: %w", c.Name, err)
		}
	}
	return nil
}
