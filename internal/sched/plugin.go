// Package sched is gpuslice's kube-scheduler framework plugin: it filters
// nodes and GPUs by free capacity, health and measured utilization, scores by
// placement policy, reserves GPUs and writes the assignment annotation on the
// pod before it is bound. The decisions are made by internal/alloc; this
// package adapts them to the framework and keeps the books in step with the
// API server.
package sched

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "GPUSlice"

const stateKey fwk.StateKey = Name

var (
	_ fwk.PreFilterPlugin   = &Plugin{}
	_ fwk.FilterPlugin      = &Plugin{}
	_ fwk.ScorePlugin       = &Plugin{}
	_ fwk.ReservePlugin     = &Plugin{}
	_ fwk.PostFilterPlugin  = &Plugin{}
	_ fwk.BindPlugin        = &Plugin{}
	_ fwk.PostBindPlugin    = &Plugin{}
	_ fwk.EnqueueExtensions = &Plugin{}
)

// Plugin is the framework plugin. Its state lives behind Allocator.
type Plugin struct {
	alloc  Allocator
	writer AssignmentWriter
	events Events
	// synced reports whether the pod handler has seen the initial list,
	// so the books hold every bound pod's assignment; nil: always.
	synced func() bool
	wait   *waiters
	// candidates: how many best nodes PreFilter hands over (0: all).
	candidates int
	// metrics: decisions and latencies (nil: none).
	metrics *pluginMetrics
}

// cycle is the per-pod scheduling-cycle state.
type cycle struct {
	req *api.PodRequest
	gen uint64 // waiters generation when the cycle started
	// narrowed: PreFilter handed over only candidate nodes.
	narrowed bool
	got      *api.Assignment
	// boundByUs: our Bind wrote the assignment with the binding.
	boundByUs bool
}

func (c *cycle) Clone() fwk.StateData { return c }

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

func readCycle(state fwk.CycleState) (*cycle, bool) {
	d, err := state.Read(stateKey)
	if err != nil {
		return nil, false
	}
	c, ok := d.(*cycle)
	return c, ok
}

// PreFilter parses the pod's gpuslice request; pods without one skip the
// plugin, malformed ones are unschedulable with an Event saying why.
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (_ *fwk.PreFilterResult, _ *fwk.Status) {
	start, result := time.Now(), ""
	defer func() { p.metrics.done(pointPreFilter, result, start) }()
	if p.synced != nil && !p.synced() && !cache.WaitForCacheSync(ctx.Done(), p.synced) {
		return nil, fwk.AsStatus(errNotSynced)
	}
	req, err := api.ParseRequest(pod)
	if err != nil {
		p.events.InvalidRequest(ctx, pod, err)
		result = resultInvalid
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if req.Empty() {
		result = resultSkip
		return nil, fwk.NewStatus(fwk.Skip)
	}
	result = resultAllNodes
	c := &cycle{req: req, gen: p.wait.generation()}
	state.Write(stateKey, c)
	if p.candidates == 0 || p.wait.widened(pod) {
		return nil, nil
	}
	// Only the best nodes by free GPU capacity and placement go on to the
	// other plugins; none fitting means every node is filtered, so the
	// pod's status says why each was rejected.
	if best := p.alloc.Best(req, p.candidates); len(best) > 0 {
		c.narrowed = true
		result = resultCandidates
		return &fwk.PreFilterResult{NodeNames: sets.New(best...)}, nil
	}
	return nil, nil
}

// PreFilterExtensions implements fwk.PreFilterPlugin.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter admits nodes with enough healthy, idle-enough GPU capacity.
func (p *Plugin) Filter(_ context.Context, state fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	c, ok := readCycle(state)
	if !ok {
		return fwk.AsStatus(errNoState)
	}
	start := time.Now()
	if err := p.alloc.Check(ni.Node().Name, c.req); err != nil {
		p.metrics.done(pointFilter, resultNoFit, start)
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	p.metrics.done(pointFilter, resultFit, start)
	return nil
}

// PostFilter handles a GPU pod that fit nowhere: if only candidate nodes
// were tried, it is retried at once against every node; otherwise it is
// parked until capacity is freed. It never makes a pod schedulable itself.
func (p *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	c, ok := readCycle(state)
	switch {
	case !ok:
	case c.narrowed: // other plugins rejected our candidates: retry on all nodes now
		start := time.Now()
		p.wait.widen(pod)
		p.wait.activate(ctx, map[string]*corev1.Pod{pod.Namespace + "/" + pod.Name: pod})
		p.metrics.done(pointPostFilter, resultWidened, start)
	default:
		start := time.Now()
		p.wait.park(ctx, pod, c.gen)
		p.metrics.done(pointPostFilter, resultParked, start)
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

// Score rates a node that passed Filter by placement policy.
func (p *Plugin) Score(_ context.Context, state fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	c, ok := readCycle(state)
	if !ok {
		return 0, nil
	}
	start := time.Now()
	score := p.alloc.Score(ni.Node().Name, c.req)
	p.metrics.done(pointScore, "", start)
	return score, nil
}

// ScoreExtensions implements fwk.ScorePlugin.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// Reserve books GPUs on the chosen node; a race lost since Filter makes the
// pod retry.
func (p *Plugin) Reserve(_ context.Context, state fwk.CycleState, pod *corev1.Pod, node string) *fwk.Status {
	c, ok := readCycle(state)
	if !ok {
		return nil
	}
	start := time.Now()
	a, err := p.alloc.Reserve(string(pod.UID), node, c.req)
	if err != nil {
		p.metrics.done(pointReserve, resultConflict, start)
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	p.metrics.done(pointReserve, resultReserved, start)
	p.wait.forget(pod)
	c.got = a
	return nil
}

// Unreserve returns the pod's GPUs when a later step fails.
func (p *Plugin) Unreserve(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ string) {
	if _, ok := readCycle(state); ok {
		p.alloc.Release(string(pod.UID))
		p.wait.wake(ctx)
	}
}

// Bind binds the pod and writes its assignment annotation in one API call
// (the Binding's annotations are merged into the pod atomically), so no pod
// is ever bound without its assignment. Pods without GPUs are left to the
// next binder (DefaultBinder).
func (p *Plugin) Bind(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, node string) *fwk.Status {
	c, ok := readCycle(state)
	if !ok || c.got == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	start := time.Now()
	if err := p.writer.Bind(ctx, pod, node, c.got); err != nil {
		p.metrics.done(pointBind, resultError, start)
		return fwk.AsStatus(err)
	}
	p.metrics.done(pointBind, resultBound, start)
	c.boundByUs = true
	return nil
}

// PostBind is the safety net for profiles where another binder ran before
// ours: it writes the assignment right after binding.
func (p *Plugin) PostBind(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ string) {
	c, ok := readCycle(state)
	if !ok || c.got == nil || c.boundByUs {
		return
	}
	logger := klog.FromContext(ctx)
	logger.Info("another bind plugin bound a GPU pod; writing its assignment after binding (put GPUSlice first among bind plugins)", "pod", klog.KObj(pod))
	if err := p.writer.Annotate(ctx, pod, c.got); err != nil {
		logger.Error(err, "writing assignment after binding", "pod", klog.KObj(pod))
	}
}

// EventsToRegister: pods rejected for lack of GPUs may fit after a GPUNode
// changes, a pod goes away, a node appears, or the pod itself is updated.
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	gpuNodes := fwk.EventResource(v1alpha2.GPUNodeResource + "." + v1alpha2.Version + "." + api.Group)
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: gpuNodes, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: p.gpuNodeHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete | fwk.Update}},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add}},
	}, nil
}
