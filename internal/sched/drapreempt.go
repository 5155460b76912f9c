package sched

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// selectDRAVictims is SelectVictimsOnNode for a pod whose devices come
// from ResourceClaims. The DynamicResources plugin has no RemovePod, so the
// generic dry run never sees a victim's claim deallocated; the victims are
// chosen here instead, by the node's devices and the stock allocator
// (draVictims), with the capacity held for the pods nominated to the node
// of at least the pod's priority allocated first. The other plugins then
// see the victims taken off; a rejection by DynamicResources (which still
// counts the victims' claims) or by GPUSlice's hold of that same nominated
// capacity (counted already) does not stand in the way.
func (pr *preemptor) selectDRAVictims(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo,
	allowed []*preemption.DomainVictim, protected string) ([]*corev1.Pod, int, *fwk.Status) {
	node := ni.Node().Name
	claims, missing := pr.dra.pendingClaims(pod)
	if missing > 0 {
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "the pod's ResourceClaims do not all exist yet")
	}
	var snap *draSnapshot
	if c, ok := readCycle(state); ok {
		snap = c.draSnap
	}
	n, err := pr.dra.readNode(snap, ni)
	if err != nil {
		return nil, 0, fwk.AsStatus(err)
	}
	cands, byUID := draCands(allowed)
	gone := terminating(ni)
	if sd := steered(state); sd != nil {
		n.withoutBusy(sd.busy, gone, cands)
	}
	need := append(pr.heldClaims(pod, node), claims...)
	uids, err := n.draVictims(ctx, need, gone, cands)
	if errors.Is(err, alloc.ErrNoVictims) {
		msg := "evicting the lower-priority pods here would not free enough for the pod's claims"
		if protected != "" {
			msg += " (" + protected + " protect others)"
		}
		return nil, 0, fwk.NewStatus(fwk.Unschedulable, msg)
	}
	if err != nil {
		return nil, 0, fwk.AsStatus(err)
	}
	var victims []*preemption.DomainVictim
	seen := map[*preemption.DomainVictim]bool{}
	for _, u := range uids {
		if v := byUID[u]; !seen[v] {
			seen[v] = true
			victims = append(victims, v)
		}
	}
	for _, v := range victims {
		if err := pr.move(ctx, state, pod, ni, v, false); err != nil {
			return nil, 0, fwk.AsStatus(err)
		}
	}
	skipOwnFilters(state)
	if st := pr.fh.RunFilterPluginsWithNominatedPods(ctx, state, pod, ni); !st.IsSuccess() &&
		!isDRAPlugin(st.Plugin()) && st.Plugin() != Name {
		return nil, 0, st
	}
	chosen := sets.New[types.UID]()
	for _, u := range uids {
		chosen.Insert(types.UID(u))
	}
	pr.rec.choseGPUs(pod.UID, node, n.freedGPUs(chosen))
	return pr.chose(pod, node, victims), 0, nil
}

// skipOwnFilters leaves the DynamicResources plugins (stock or wrapped)
// and GPUSlice out of the Filter plugins a dry run's node state (its own
// clone) runs: draVictims' allocator runs decided the claims already, and
// their refusals (DynamicResources still counts the victims' claims,
// GPUSlice the nominated capacity draVictims allocated first) would not
// stand in the way; run, they cost the allocator once or twice more, and
// a refusal of theirs would keep the plugins after them from being asked.
func skipOwnFilters(state fwk.CycleState) {
	skip := sets.New(names.DynamicResources, DRAName, Name)
	if cur := state.GetSkipFilterPlugins(); cur != nil {
		skip = skip.Union(cur)
	}
	state.SetSkipFilterPlugins(skip)
}

// draCands are the pods of allowed (least important first) not terminating
// already, as victim candidates, with the victim each belongs to.
func draCands(allowed []*preemption.DomainVictim) ([]alloc.Victim, map[string]*preemption.DomainVictim) {
	byUID := map[string]*preemption.DomainVictim{}
	var cands []alloc.Victim
	for _, v := range allowed {
		for _, pi := range v.Pods() {
			p := pi.GetPod()
			if p.DeletionTimestamp == nil {
				cands = append(cands, alloc.Victim{UID: string(p.UID), Priority: v.Priority()})
				byUID[string(p.UID)] = v
			}
		}
	}
	return cands, byUID
}

// terminating are the node's pods being deleted: their claims count as
// deallocated.
func terminating(ni fwk.NodeInfo) sets.Set[types.UID] {
	gone := sets.New[types.UID]()
	for _, pi := range ni.GetPods() {
		if p := pi.GetPod(); p.DeletionTimestamp != nil {
			gone.Insert(p.UID)
		}
	}
	return gone
}

// heldClaims are the pending claims of the pods nominated to node (other
// than pod, of at least its priority, not bound yet): the capacity held for
// them until they bind.
func (pr *preemptor) heldClaims(pod *corev1.Pod, node string) []*resourceapi.ResourceClaim {
	claims, _ := pr.heldFor(pod, node)
	return claims
}

// heldFor is heldClaims with the pods they belong to (namespace/name).
func (pr *preemptor) heldFor(pod *corev1.Pod, node string) (claims []*resourceapi.ResourceClaim, who []string) {
	prio := corev1helpers.PodPriority(pod)
	for _, pi := range pr.fh.NominatedPodsForNode(node) {
		np := pi.GetPod()
		if np.UID == pod.UID || np.Spec.NodeName != "" || corev1helpers.PodPriority(np) < prio || !pr.dra.usesClaims(np) {
			continue
		}
		cs, _ := pr.dra.pendingClaims(np)
		if len(cs) > 0 {
			claims = append(claims, cs...)
			who = append(who, np.Namespace+"/"+np.Name)
		}
	}
	return claims, who
}

// busyFor are the busy GPUs (UUIDs, Books.BusyGPUs) the device view hides
// from pod: every GPU measured above the threshold but those its last
// preemption's victims freed (recorded at the preemption, choseGPUs):
// part of what was measured there is the victims' work, as the plugin
// path's freed GPUs. The node's other busy GPUs stay hidden. A pod
// nominated with no such record (a restarted scheduler's, one whose later
// preemption found no node, one whose victims' claims hold no GPU the
// record names) is shown every busy GPU of its nominated node, as before
// the record: which of them its victims freed is not known.
func (p *Plugin) busyFor(b *Books, pod *corev1.Pod) map[string]bool {
	busy := b.BusyGPUs("")
	if len(busy) == 0 {
		return busy
	}
	var freed []string
	if p != nil && p.preempt != nil && p.preempt.rec != nil {
		freed = p.preempt.rec.freedGPUs(pod.UID)
	}
	if len(freed) == 0 {
		return b.BusyGPUs(pod.Status.NominatedNodeName)
	}
	out := maps.Clone(busy)
	for _, u := range freed {
		delete(out, u)
	}
	return out
}

// postFilterDRA preempts for a pod whose devices come from ResourceClaims
// (kube-scheduler's Evaluator with selectDRAVictims); its victims' claims
// are deallocated as soon as the victims are gone (claimReleaser), so it
// binds without waiting for the resource claim controller.
func (p *Plugin) postFilterDRA(ctx context.Context, c *cycle, state fwk.CycleState, pod *corev1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	pr := p.preempt
	if pr == nil || pr.dra == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	start := time.Now()
	// The allocator refused every candidate: retry on all nodes now, unless
	// the pod waits for its own victims' claims (it was retried on a
	// victim's deletion, or on another preemptor's freed claim: only its
	// nominated node and the candidates are worth the allocator's runs): a
	// widened pod would run the allocator on every node at each try.
	if c.narrowed && !pr.rec.waiting(pod.UID, start, pr.holds) {
		p.wait.widen(pod)
		p.wait.activate(ctx, map[string]*corev1.Pod{pod.Namespace + "/" + pod.Name: pod})
		p.metrics.done(pointPostFilter, resultWidened, start)
		// UnschedulableAndUnresolvable ends PostFilter here (the code does
		// not change how the pod is queued): DefaultPreemption's dry run,
		// the stock allocator on up to 100 nodes that never sees a claim
		// freed, would be wasted on a pod retried now.
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "retrying on every node")
	}
	m = draStatuses{NodeToStatusReader: m, pod: pod, nodes: pr.fh.SnapshotSharedLister().NodeInfos()}
	c.startDryRun() // one read of the slices and the allocated state for the dry run's nodes (dra.go)
	c.draSnap.fromPreFilter(steered(state))
	if ok, msg := pr.PodEligibleToPreemptOthers(ctx, pod, m.Get(pod.Status.NominatedNodeName)); !ok {
		if c.draNeed.whole {
			p.reserveFor(pod, m, start)
		}
		p.metrics.done(pointPostFilter, resultParked, start)
		// It waits for its own victims: nobody preempts for it meanwhile.
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg)
	}
	r, st := pr.preemptDRA(ctx, c, state, pod, m)
	nominated := ""
	if st.IsSuccess() && r != nil && r.NominatingInfo != nil && r.NominatingInfo.Mode() == fwk.ModeOverride {
		nominated = r.NominatingInfo.NominatedNodeName
	}
	pr.release.expect(pod, pr.rec.commit(pod.UID, nominated, time.Now()))
	if !st.IsSuccess() && st.Code() != fwk.Error && c.draNeed.whole {
		p.reserveFor(pod, m, time.Now())
	}
	// Unschedulable: DefaultPreemption may still free what is not a
	// device (a node's CPU or memory).
	return p.preempted(r, st, start, fwk.Unschedulable)
}

// heldMsg begins GPUSlice's Filter refusal of a node whose devices are held
// for nominated pods.
const heldMsg = "the node's devices are held for nominated pods"

// filterDRA holds, for a pod whose devices come from ResourceClaims, the
// capacity of the pods nominated to the node in this cycle's view (of at
// least its priority: the framework adds them through AddPod): the node
// passes only if their pending claims and the pod's fit there together, by
// the stock allocator on the node's slices from the allocated state the
// cycle read once (draFilterView), as DynamicResources' own Filter does.
func (p *Plugin) filterDRA(ctx context.Context, c *cycle, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	if r := p.reservedAgainst(c, pod, ni.Node().Name, time.Now()); r != "" {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("the node is reserved for pod %s, which waits for whole devices (backfill)", r))
	}
	env := p.draEnv()
	if name := env.servesMapped(pod, ni); name != "" {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("the node offers %s itself (device plugin); the pod's is mapped to DRA", name))
	}
	added := c.draAdded[ni.Node().Name]
	if len(added) == 0 || env == nil {
		return nil
	}
	var claims []*resourceapi.ResourceClaim
	var who []string
	for _, np := range added {
		cs, _ := env.pendingClaims(np)
		claims = append(claims, cs...)
		who = append(who, np.Namespace+"/"+np.Name)
	}
	own, _ := env.pendingClaims(pod)
	view := c.draFilter
	if view == nil {
		view = &draFilterView{}
	}
	ok, err := view.fits(ctx, env, c.draState, ni.Node(), append(claims, own...))
	if err != nil {
		return fwk.AsStatus(err)
	}
	if !ok {
		return fwk.NewStatus(fwk.Unschedulable, heldMsg+" "+strings.Join(who, ", "))
	}
	return nil
}

// draFilterView is what filterDRA reads, once per scheduling cycle (shared
// by the cycle's clones, one per node filtered): the claim tracker's
// allocated state (in-flight allocations included) and the ResourceSlices
// by node. Reading every slice and claim of the cluster for each node
// filtered was most of a DRA preemption burst's scheduler CPU.
type draFilterView struct {
	once   sync.Once
	err    error
	st     *structured.AllocatedState
	slices map[string][]*resourceapi.ResourceSlice
}

func (v *draFilterView) read(e *draEnv, st *structured.AllocatedState) error {
	v.once.Do(func() {
		if v.st = st; st == nil {
			if v.st, v.err = e.allocatedState(); v.err != nil {
				return
			}
		}
		all, err := e.dra.ResourceSlices().ListWithDeviceTaintRules()
		if err != nil {
			v.err = fmt.Errorf("resource slices: %w", err)
			return
		}
		v.slices = e.byNode.of(all)
	})
	return v.err
}

// fits asks the stock allocator whether claims can all be allocated on
// node (st: the state PreFilter read, nil: read it now).
func (v *draFilterView) fits(ctx context.Context, e *draEnv, st *structured.AllocatedState, node *corev1.Node, claims []*resourceapi.ResourceClaim) (bool, error) {
	if len(claims) == 0 {
		return true, nil
	}
	if err := v.read(e, st); err != nil {
		return false, err
	}
	slices := v.slices[node.Name]
	if len(slices) == 0 {
		return false, nil
	}
	a, err := structured.NewAllocator(ctx, e.features, *v.st, e.dra.DeviceClasses(), slices, e.cel)
	if err != nil {
		return false, fmt.Errorf("allocator: %w", err)
	}
	res, err := a.Allocate(ctx, node, claims)
	switch {
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return false, nil
	case err != nil:
		return false, err
	}
	return len(res) == len(claims), nil
}

// draStatuses is the Filter statuses of a pod with ResourceClaims as
// preemption should read them: the DynamicResources plugin rejects a node
// whose devices are taken as UnschedulableAndUnresolvable (it cannot free
// them), which would keep preemption off every node; those rejections count
// as Unschedulable here. Its rejections that preemption cannot help (a
// claim allocated elsewhere, a node lacking a feature) stay as they are.
//
// A refusal by GPUSlice's PreFilter (no device has the share free, or none not held) stands
// for every node, also those the pod's node selector or required affinity
// excludes, which Filter (NodeAffinity) would have marked unresolvable:
// preemption must not try them, so they count as UnschedulableAndUnresolvable.
type draStatuses struct {
	fwk.NodeToStatusReader
	pod   *corev1.Pod        // nil: no affinity check
	nodes fwk.NodeInfoLister // the nodes, for the affinity check
}

// excluded tells whether the pod's node selector or required affinity
// excludes node, which st (Unschedulable) does not say.
func (d draStatuses) excluded(node *corev1.Node, st *fwk.Status) bool {
	if d.pod == nil || node == nil || st.Code() != fwk.Unschedulable {
		return false
	}
	m, err := nodeaffinity.GetRequiredNodeAffinity(d.pod).Match(node)
	return err == nil && !m
}

// draPreemptable tells whether st is a DynamicResources rejection for lack
// of devices.
func draPreemptable(st *fwk.Status) bool {
	if st.Code() != fwk.UnschedulableAndUnresolvable || !isDRAPlugin(st.Plugin()) {
		return false
	}
	msg := st.Message()
	return !strings.Contains(msg, "not available on the node") && !strings.Contains(msg, "DRAOptionalNodeOperations") &&
		!strings.Contains(msg, "binding")
}

// Get implements fwk.NodeToStatusReader.
func (d draStatuses) Get(node string) *fwk.Status {
	st := d.NodeToStatusReader.Get(node)
	if draPreemptable(st) {
		return fwk.NewStatus(fwk.Unschedulable, st.Reasons()...).WithPlugin(st.Plugin())
	}
	if d.nodes != nil && st.Code() == fwk.Unschedulable {
		if ni, err := d.nodes.Get(node); err == nil && d.excluded(ni.Node(), st) {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) didn't match Pod's node affinity/selector")
		}
	}
	return st
}

// NodesForStatusCode implements fwk.NodeToStatusReader.
func (d draStatuses) NodesForStatusCode(l fwk.NodeInfoLister, code fwk.Code) ([]fwk.NodeInfo, error) {
	out, err := d.NodeToStatusReader.NodesForStatusCode(l, code)
	if err != nil || (code != fwk.Unschedulable && code != fwk.UnschedulableAndUnresolvable) {
		return out, err
	}
	var keep []fwk.NodeInfo
	if code == fwk.UnschedulableAndUnresolvable {
		for _, ni := range out {
			if !draPreemptable(d.NodeToStatusReader.Get(ni.Node().Name)) {
				keep = append(keep, ni)
			}
		}
		more, err := d.NodeToStatusReader.NodesForStatusCode(l, fwk.Unschedulable)
		if err != nil {
			return nil, err
		}
		for _, ni := range more {
			if d.excluded(ni.Node(), d.NodeToStatusReader.Get(ni.Node().Name)) {
				keep = append(keep, ni)
			}
		}
		return keep, nil
	}
	for _, ni := range out {
		if !d.excluded(ni.Node(), d.NodeToStatusReader.Get(ni.Node().Name)) {
			keep = append(keep, ni)
		}
	}
	more, err := d.NodeToStatusReader.NodesForStatusCode(l, fwk.UnschedulableAndUnresolvable)
	if err != nil {
		return nil, err
	}
	for _, ni := range more {
		if draPreemptable(d.NodeToStatusReader.Get(ni.Node().Name)) {
			keep = append(keep, ni)
		}
	}
	return keep, nil
}
