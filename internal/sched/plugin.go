// Package sched is gpuslice's kube-scheduler framework plugin: it filters
// nodes and GPUs by free capacity, health and measured utilization, scores by
// placement policy, reserves GPUs and writes the assignment annotation on the
// pod before it is bound. The decisions are made by internal/alloc; this
// package adapts them to the framework and keeps the books in step with the
// API server.
package sched

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "GPUSlice"

const stateKey fwk.StateKey = Name

var (
	_ fwk.PreFilterPlugin   = &Plugin{}
	_ fwk.PreEnqueuePlugin  = &Plugin{}
	_ fwk.FilterPlugin      = &Plugin{}
	_ fwk.ScorePlugin       = &Plugin{}
	_ fwk.PreScorePlugin    = &Plugin{}
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
	// nominated lists the pods nominated to a node (the framework's
	// nominator; nil: none), held for in Reserve.
	nominated func(node string) []fwk.PodInfo
	// preempt chooses and evicts victims for GPU pods (nil: no preemption).
	preempt *preemptor
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
	// over: per node, the pods AddPod and RemovePod put on or took off it
	// (preemption's dry run, nominated pods); Filter decides on it.
	over map[string]*alloc.Overlay
	// dra: the pod asks for no gpuslice resources but has ResourceClaims
	// (drapreempt.go); draAdded: per node, the pods with claims AddPod put
	// there (nominated, not bound): their capacity is held.
	dra      bool
	draAdded map[string][]*corev1.Pod
	// draUse: the scored nodes' device use (PreScore), read-only; draNeed
	// what the pod's pending claims need.
	draUse  map[string]*nodeUse
	draNeed claimNeed
	// draSlices: the slices of the candidate nodes as PreFilter's device
	// view listed them (empty: not known).
	draSlices candSlices
	// draState: the claim tracker's allocated state as PreFilter read it
	// for the candidates (nil: not read), read-only.
	draState *structured.AllocatedState
	// draSnap: the slices and claims a preemption's dry run reads (shared
	// by the clones of one PostFilter).
	draSnap *draSnapshot
	// draFilter: what filterDRA reads once per cycle (shared by clones).
	draFilter *draFilterView
	// draClaims: the pod's claims to allocate; flightGen: draFlights'
	// generation when the cycle started.
	draClaims []types.UID
	flightGen uint64
}

// Clone copies the cycle for a what-if (the framework clones the state for
// preemption's dry run and for nominated pods): its overlays are its own.
func (c *cycle) Clone() fwk.StateData {
	n := *c
	if c.draAdded != nil {
		n.draAdded = make(map[string][]*corev1.Pod, len(c.draAdded))
		for k, v := range c.draAdded {
			n.draAdded[k] = slices.Clone(v)
		}
	}
	if c.over != nil {
		n.over = make(map[string]*alloc.Overlay, len(c.over))
		for k, o := range c.over {
			n.over[k] = o.Clone()
		}
	}
	return &n
}

// overlay returns the node's overlay, made on first use.
func (c *cycle) overlay(node string) *alloc.Overlay {
	if c.over == nil {
		c.over = map[string]*alloc.Overlay{}
	}
	o := c.over[node]
	if o == nil {
		o = &alloc.Overlay{}
		c.over[node] = o
	}
	return o
}

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
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (_ *fwk.PreFilterResult, _ *fwk.Status) {
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
	if env := p.draEnv(); env != nil && (req.Empty() && hasClaims(pod) || env.mappedClaim(pod) != nil) {
		// Kept for the capacity nominated pods hold (Filter) and for
		// preemption (PostFilter); the DynamicResources plugin allocates.
		result = resultDRA
		r, st := p.preFilterDRA(state, pod, req, nodes)
		if !st.IsSuccess() {
			result = resultNoFit
		}
		return r, st
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
	// other plugins. None fitting by the books means Filter would reject
	// every node: the pod is rejected here, on every node alike, without
	// running every Filter plugin on every node (with a burst of
	// preemptors, most of their CPU); PostFilter then preempts.
	if node := p.fitsNominated(pod, req); node != "" {
		c.narrowed = true
		result = resultNominated
		return &fwk.PreFilterResult{NodeNames: sets.New(node)}, nil
	}
	best := p.alloc.Best(req, p.candidates, p.held(pod))
	if len(best) == 0 {
		result = resultNoFit
		return nil, fwk.NewStatus(fwk.Unschedulable, noRoom(req, p.alloc.Refusals(req, refusalsTold)))
	}
	c.narrowed = true
	result = resultCandidates
	return &fwk.PreFilterResult{NodeNames: sets.New(best...)}, nil
}

// PreFilterExtensions implements fwk.PreFilterPlugin: AddPod and RemovePod.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return p }

// AddPod puts a pod on the node in this cycle's view: a pod RemovePod took
// off counts again; a pod not booked (one nominated to the node) is placed
// there before the pod being scheduled.
func (p *Plugin) AddPod(_ context.Context, state fwk.CycleState, _ *corev1.Pod, add fwk.PodInfo, ni fwk.NodeInfo) *fwk.Status {
	c, ok := readCycle(state)
	if !ok {
		return nil
	}
	pod, node := add.GetPod(), ni.Node().Name
	if c.dra {
		if pod.Spec.NodeName == "" && p.draEnv().usesClaims(pod) {
			if c.draAdded == nil {
				c.draAdded = map[string][]*corev1.Pod{}
			}
			c.draAdded[node] = append(c.draAdded[node], pod)
		}
		return nil
	}
	uid := string(pod.UID)
	o := c.overlay(node)
	if o.Restore(uid) || p.alloc.Holds(uid, node) {
		return nil
	}
	if req, err := api.ParseRequest(pod); err == nil && !req.Empty() {
		o.Add(uid, req)
	}
	return nil
}

// RemovePod takes a pod off the node in this cycle's view: its GPUs, units
// and memory count as free (preemption's dry run of evicting it).
func (p *Plugin) RemovePod(_ context.Context, state fwk.CycleState, _ *corev1.Pod, rm fwk.PodInfo, ni fwk.NodeInfo) *fwk.Status {
	c, ok := readCycle(state)
	if !ok {
		return nil
	}
	uid, node := string(rm.GetPod().UID), ni.Node().Name
	if c.dra {
		if c.draAdded == nil {
			return nil
		}
		c.draAdded[node] = slices.DeleteFunc(c.draAdded[node], func(q *corev1.Pod) bool { return q.UID == rm.GetPod().UID })
		return nil
	}
	c.overlay(node).Remove(uid, p.alloc.Holds(uid, node))
	return nil
}

// Filter admits nodes with enough healthy, idle-enough GPU capacity, as this
// cycle's view of the node has it.
func (p *Plugin) Filter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	c, ok := readCycle(state)
	if !ok {
		return fwk.AsStatus(errNoState)
	}
	if c.dra {
		return p.filterDRA(ctx, c, pod, ni)
	}
	start := time.Now()
	node := ni.Node().Name
	var err error
	if o := c.over[node]; !o.Empty() {
		err = p.alloc.CheckWith(node, c.req, o)
	} else {
		err = p.alloc.Check(node, c.req)
	}
	if err != nil {
		p.metrics.done(pointFilter, resultNoFit, start)
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	p.metrics.done(pointFilter, resultFit, start)
	return nil
}

// PostFilter handles a GPU pod that fit nowhere: if only candidate nodes
// were tried, it is retried at once against every node; otherwise it
// preempts lower-priority pods where that makes room (preempt.go, the
// nodes tried shortlisted by the books: shortlist.go), and is
// parked until capacity is freed. For GPU pods it is the last PostFilter
// plugin to run: DefaultPreemption after it would choose other victims and
// overrule PodDisruptionBudgets. Pods without GPUs are left to the next one.
func (p *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	c, ok := readCycle(state)
	if !ok {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	if c.dra {
		r, st := p.postFilterDRA(ctx, c, state, pod, m)
		if !st.IsSuccess() {
			p.preempt.flights.refused(ctx, pod, c.flightGen)
		}
		return r, st
	}
	start := time.Now()
	if c.narrowed { // other plugins rejected our candidates: retry on all nodes now
		p.wait.widen(pod)
		p.wait.activate(ctx, map[string]*corev1.Pod{pod.Namespace + "/" + pod.Name: pod})
		p.metrics.done(pointPostFilter, resultWidened, start)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "retrying on every node")
	}
	if p.preempt == nil {
		p.wait.park(ctx, pod, c.gen)
		p.metrics.done(pointPostFilter, resultParked, start)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable)
	}
	r, st := p.preempt.preempt(ctx, state, pod, c.req, m, p.nominated)
	nominated := ""
	if r != nil && r.NominatingInfo != nil && r.NominatingInfo.Mode() == fwk.ModeOverride {
		// As kube-scheduler's nominator will have it (a failed preemption
		// clears the pod's nomination).
		p.preempt.rec.nominate(pod.UID, r.NominatingInfo.NominatedNodeName, corev1helpers.PodPriority(pod), c.req)
		if st.IsSuccess() {
			nominated = r.NominatingInfo.NominatedNodeName
		}
	}
	p.preempt.rec.commit(pod.UID, nominated, time.Now())
	p.wait.park(ctx, pod, c.gen)
	return p.preempted(r, st, start, fwk.UnschedulableAndUnresolvable)
}

// preempted ends PostFilter after a preemption: its result as it is when it
// succeeded or failed with an error, else its reason with code.
func (p *Plugin) preempted(r *fwk.PostFilterResult, st *fwk.Status, start time.Time, code fwk.Code) (*fwk.PostFilterResult, *fwk.Status) {
	if st.IsSuccess() {
		p.metrics.done(pointPostFilter, resultPreempted, start)
		return r, st
	}
	p.metrics.done(pointPostFilter, resultParked, start)
	if st.Code() == fwk.Error {
		return r, st
	}
	return r, fwk.NewStatus(code, "preemption: "+st.Message())
}

// PreEnqueue holds back a pod whose victims are still being evicted.
func (p *Plugin) PreEnqueue(_ context.Context, pod *corev1.Pod) *fwk.Status {
	if p.preempt != nil && p.preempt.exec.IsPodRunningPreemption(pod.UID) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "waiting for the pods it preempts to be evicted")
	}
	return nil
}

// PreScore reads, for a pod with ResourceClaims, the device use of the
// nodes that passed Filter (once per cycle: Score reads it per node).
func (p *Plugin) PreScore(_ context.Context, state fwk.CycleState, _ *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	c, ok := readCycle(state)
	if !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	if !c.dra || p.preempt == nil || p.preempt.dra == nil || p.alloc.Policy(c.req) == api.PlacementFirstFit {
		return nil
	}
	names := sets.New[string]()
	for _, ni := range nodes {
		names.Insert(ni.Node().Name)
	}
	use, err := p.preempt.dra.usage(names, c.draState, c.draSlices.of(names))
	if err != nil {
		return fwk.AsStatus(err)
	}
	c.draUse = use
	return nil
}

// Score rates a node that passed Filter by placement policy.
func (p *Plugin) Score(_ context.Context, state fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	c, ok := readCycle(state)
	if !ok {
		return 0, nil
	}
	if c.dra {
		u := c.draUse[ni.Node().Name]
		if u == nil {
			return 0, nil
		}
		return alloc.PolicyScore(p.alloc.Policy(c.req), u.used, u.adds(c.draNeed), u.n), nil
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
	if c.dra {
		p.reserveDRA(c, pod)
		return nil
	}
	start := time.Now()
	a, err := p.alloc.ReserveWith(string(pod.UID), node, corev1helpers.PodPriority(pod), c.req, p.heldFor(pod, node))
	if err != nil {
		p.metrics.done(pointReserve, resultConflict, start)
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	p.metrics.done(pointReserve, resultReserved, start)
	p.wait.forget(pod)
	if p.preempt != nil {
		p.preempt.rec.forget(pod.UID)
	}
	c.got = a
	return nil
}

// Unreserve returns the pod's GPUs when a later step fails.
func (p *Plugin) Unreserve(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ string) {
	c, ok := readCycle(state)
	switch {
	case ok && c.dra:
		p.preempt.flights.failed(context.WithoutCancel(ctx), pod.UID, c.draClaims)
	case ok:
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
	if ok && c.dra {
		p.preempt.flights.end(ctx, pod.UID)
		return
	}
	if !ok || c.got == nil || c.boundByUs {
		return
	}
	logger := klog.FromContext(ctx)
	logger.Info("another bind plugin bound a GPU pod; writing its assignment after binding (put GPUSlice first among bind plugins)", "pod", klog.KObj(pod))
	if err := p.writer.Annotate(ctx, pod, c.got); err != nil {
		logger.Error(err, "writing assignment after binding", "pod", klog.KObj(pod))
	}
}

// noRoom says that no node has what req needs free, container by container.
// refusalsTold: how many nodes' reasons a pod rejected in PreFilter is told.
const refusalsTold = 3

// noRoom says what req needs and why the first nodes by name refuse it.
func noRoom(req *api.PodRequest, refusals []string) string {
	var b strings.Builder
	b.WriteString(errNoRoom.Error())
	for i, c := range req.Containers {
		sep := ": "
		if i > 0 {
			sep = "; "
		}
		if c.Whole {
			fmt.Fprintf(&b, "%sneeds %d whole GPUs free", sep, c.Count)
		} else {
			fmt.Fprintf(&b, "%sneeds %d GPUs with %d units and %d bytes free", sep, c.Count, c.Units, c.MemoryBytes)
		}
	}
	if len(refusals) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(refusals, "; "))
	}
	return b.String()
}
