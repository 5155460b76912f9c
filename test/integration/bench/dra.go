package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// runDRA is the DRA part of a scale (see README.md): every node publishes a
// ResourceSlice with one shareable device per GPU, then, for o.draRounds
// rounds side by side, o.draPods pods with fractional claims (units and
// memory) and o.draPods pods with a whole-GPU claim, both placed by the
// stock kube-scheduler (in turn, whole first every other round, so load
// from elsewhere hits both), and once the fractional requests as extended
// resources through gpuslice-scheduler (binpack), and once the fractional
// claims through gpuslice-scheduler. It returns the lines "dra X pods/s,
// plugin Y pods/s, whole-GPU dra Z pods/s" (means over the rounds) and "dra
// placement gpuslice X pods/s, stock Y pods/s, plugin Z pods/s" (the same
// 1,000 claims; stock: the first round's).
func runDRA(ctx context.Context, cp *harness.ControlPlane, o options, stock string) ([]string, error) {
	start := time.Now()
	err := parallel(32, o.nodes, func(i int) error {
		s, err := harness.DRASlice(fmt.Sprintf("kwok-%05d", i), o.gpus, 80*harness.GiB)
		if err != nil {
			return err
		}
		if _, err := cp.Client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("resource slice %s: %w", s.Name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := cp.CreateDeviceClasses(ctx, false); err != nil {
		return nil, err
	}
	fmt.Printf("== DRA: %d ResourceSlices (%d shareable GPUs each) published in %.1fs, %d pods per run, %d rounds\n", o.nodes, o.gpus, time.Since(start).Seconds(), o.draPods, o.draRounds)
	frac := fracMix(11, o.draPods)
	whole := make([]harness.GPURequest, o.draPods)
	for i := range whole {
		whole[i] = harness.GPURequest{GPUs: 1}
	}
	var fracs, wholes []result
	for r := 0; r < max(o.draRounds, 1); r++ {
		runs := []struct {
			name string
			reqs []harness.GPURequest
			out  *[]result
		}{{"dra-shares", frac, &fracs}, {"dra-whole", whole, &wholes}}
		if r%2 == 1 {
			runs[0], runs[1] = runs[1], runs[0]
		}
		for _, run := range runs {
			name := fmt.Sprintf("%s-%d", run.name, r)
			w, profiled := claimWorkload(cp, run.reqs), closedErr()
			if r == 0 && run.name == "dra-shares" {
				w, profiled = withAPIProfile(cp, w, o.draAPIProfile, ".stock", o.draProfile.seconds)
			}
			res, err := runWorkload(ctx, cp, stock, name, harness.SchedulerOptions{SchedulerName: name}, o.clients, w)
			if err != nil {
				return nil, err
			}
			if err := <-profiled; err != nil {
				return nil, err
			}
			printResult(res)
			*run.out = append(*run.out, res)
		}
		f, w := fracs[r], wholes[r]
		fmt.Printf("round %d: fractional / whole-GPU DRA throughput %.2f, scheduler CPU per 1,000 pods %.1f s / %.1f s\n",
			r, f.podsPerSec/w.podsPerSec, 1000*f.cpu/float64(f.bound), 1000*w.cpu/float64(w.bound))
	}
	pw, pprofiled := withAPIProfile(cp, plainWorkload(frac), o.draAPIProfile, ".plugin", o.draProfile.seconds)
	plugin, err := runWorkload(ctx, cp, o.scheduler, "plugin-shares", harness.SchedulerOptions{SchedulerName: "plugin-shares", GPUSlice: true, StockQueueSort: o.stockQueueSort,
		Args: "{placement: binpack, heartbeatTimeout: 1h}", ExtraArgs: o.extraArgs}, o.clients, pw)
	if err != nil {
		return nil, err
	}
	if err := <-pprofiled; err != nil {
		return nil, err
	}
	printResult(plugin)
	pprofArgs, err := o.draProfile.args()
	if err != nil {
		return nil, err
	}
	w, apiProfiled := withAPIProfile(cp, claimWorkload(cp, frac), o.draAPIProfile, "", o.draProfile.seconds)
	var profiled <-chan error
	w.setup, w.books, profiled = o.draProfile.during(w.setup, w.books)
	ours, err := runWorkload(ctx, cp, o.scheduler, "dra-gpuslice", harness.SchedulerOptions{SchedulerName: "dra-gpuslice", GPUSlice: true,
		StockQueueSort: o.stockQueueSort, Args: "{placement: binpack, heartbeatTimeout: 1h}", ExtraArgs: append(slices.Clone(o.extraArgs), pprofArgs...)}, o.clients, w)
	if err != nil {
		return nil, err
	}
	if err := <-profiled; err != nil {
		return nil, fmt.Errorf("dra profile: %w", err)
	}
	if err := <-apiProfiled; err != nil {
		return nil, err
	}
	printResult(ours)
	dra, wholeRes := mean(fracs), mean(wholes)
	fmt.Printf("mean over %d rounds: fractional / whole-GPU DRA throughput %.2f (target >= 0.8)\n", len(fracs), dra.podsPerSec/wholeRes.podsPerSec)
	var preempt []string
	if o.draPreemptNodes > 0 {
		line, err := runDRAPreemption(ctx, cp, o, stock)
		if err != nil {
			return nil, fmt.Errorf("dra preemption: %w", err)
		}
		preempt = append(preempt, line)
	}
	return append([]string{
		fmt.Sprintf("dra %.1f pods/s, plugin %.1f pods/s, whole-GPU dra %.1f pods/s", dra.podsPerSec, plugin.podsPerSec, wholeRes.podsPerSec),
		// issue 32: the same fractional claims through gpuslice-scheduler
		// (DynamicResources inside it), stock (first round) and the plugin path.
		fmt.Sprintf("dra placement gpuslice %.1f pods/s, stock %.1f pods/s, plugin %.1f pods/s", ours.podsPerSec, fracs[0].podsPerSec, plugin.podsPerSec),
	}, preempt...), nil
}

// fracMix is the fractional part of podMix: units 10..50, memory 4..32 GiB.
func fracMix(seed uint64, n int) []harness.GPURequest {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]harness.GPURequest, n)
	for i := range out {
		out[i] = harness.GPURequest{Units: int64(10 * (1 + r.IntN(5))), Memory: int64(1+r.IntN(8)) * 4 * harness.GiB}
	}
	return out
}

// plainWorkload asks for reqs as extended resources.
func plainWorkload(reqs []harness.GPURequest) workload {
	return workload{n: len(reqs), writes: true, pod: func(ns, scheduler string, i int) *corev1.Pod {
		return harness.Pod(ns, fmt.Sprintf("p-%05d", i), scheduler, reqs[i])
	}}
}

// claimWorkload asks for reqs through one ResourceClaim per pod, created
// before the pods (as the resource claim controller does from a template
// when the pod is created; creating them is not timed). Its books check
// that no device was given more than its capacity.
func claimWorkload(cp *harness.ControlPlane, reqs []harness.GPURequest) workload {
	claims := func(ns string) *resourceClaims { return &resourceClaims{cp: cp, ns: ns} }
	return workload{
		n: len(reqs), writes: true,
		pod: func(ns, scheduler string, i int) *corev1.Pod {
			return harness.DRAPod(ns, fmt.Sprintf("p-%05d", i), scheduler, fmt.Sprintf("claim-%05d", i), false)
		},
		setup: func(ctx context.Context, ns string) error {
			return parallel(16, len(reqs), func(i int) error {
				c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("claim-%05d", i)}, Spec: harness.DRAClaimSpec(reqs[i])}
				_, err := cp.Client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{})
				return err
			})
		},
		books:   func(ctx context.Context, ns string) (string, error) { return claims(ns).books(ctx) },
		cleanup: func(ctx context.Context, ns string) error { return claims(ns).remove(ctx) },
	}
}

type resourceClaims struct {
	cp *harness.ControlPlane
	ns string
}

// books sums the capacity the namespace's allocated claims consume per
// device and fails where a device is given more than it has.
func (c *resourceClaims) books(ctx context.Context) (string, error) {
	l, err := c.cp.Client.ResourceV1().ResourceClaims(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list claims: %w", err)
	}
	type key struct{ pool, device string }
	units, memory := map[key]int64{}, map[key]int64{}
	allocated := 0
	for _, cl := range l.Items {
		if cl.Status.Allocation == nil {
			continue
		}
		allocated++
		for _, r := range cl.Status.Allocation.Devices.Results {
			k := key{r.Pool, r.Device}
			u, m := r.ConsumedCapacity[harness.DRAUnits], r.ConsumedCapacity[harness.DRAMemory]
			units[k] += u.Value()
			memory[k] += m.Value()
		}
	}
	over, partial := 0, 0
	for k, u := range units {
		if u > 100 || memory[k] > 80*harness.GiB {
			over++
		}
		if u < 100 {
			partial++
		}
	}
	if over > 0 {
		return "", fmt.Errorf("%d devices given more than their capacity by %d claims", over, allocated)
	}
	return fmt.Sprintf("  | claims allocated %d, GPUs used %d, partly used %d, over-committed %d", allocated, len(units), partial, over), nil
}

// remove deletes the namespace's claims. Nothing here runs the resource
// claim controller (kube-controller-manager), which takes the scheduler's
// delete-protection finalizer off once no pod uses a claim: the pods are
// gone, so the bench does that itself.
func (c *resourceClaims) remove(ctx context.Context) error {
	claims := c.cp.Client.ResourceV1().ResourceClaims(c.ns)
	l, err := claims.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list claims: %w", err)
	}
	err = parallel(16, len(l.Items), func(i int) error {
		name := l.Items[i].Name
		if _, err := claims.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("claim %s: %w", name, err)
		}
		if err := claims.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("claim %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	return harness.WaitFor(wctx, time.Second, func() (bool, error) {
		l, err := claims.List(wctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(l.Items) == 0, nil
	})
}

func closedErr() <-chan error {
	c := make(chan error, 1)
	c <- nil
	return c
}

// withAPIProfile wraps w so that a CPU profile of kube-apiserver of seconds
// (to path+suffix) starts once the setup is done, as the pods start to
// arrive, and the run's read-back waits for it (-dra-apiserver-profile;
// none when path is empty). The channel gives the outcome after the run.
func withAPIProfile(cp *harness.ControlPlane, w workload, path, suffix string, seconds int) (workload, <-chan error) {
	if path == "" {
		return w, closedErr()
	}
	setup, books := w.setup, w.books
	started, done := make(chan (<-chan error), 1), make(chan error, 1)
	w.setup = func(ctx context.Context, ns string) error {
		if setup != nil {
			if err := setup(ctx, ns); err != nil {
				started <- closedErr()
				return err
			}
		}
		started <- apiserverProfile(ctx, cp, path+suffix, seconds)
		return nil
	}
	read := func() { done <- <-<-started }
	if books == nil {
		// (no books: the run reads the GPUNode books; the profile is
		// waited for after the run)
		go read()
		return w, done
	}
	w.books = func(ctx context.Context, ns string) (string, error) {
		read()
		return books(ctx, ns)
	}
	return w, done
}
