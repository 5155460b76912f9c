package sched

import (
	"context"
	"iter"
	"math/rand/v2"
	"sort"

	corev1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// shortlistLen is how many nodes, cheapest first by the books, preemption's
// dry run (every Filter plugin, per node) confirms before the generic dry
// run over DefaultPreemption's candidate nodes is tried.
const shortlistLen = 3

// nodeCost is what preempting for a pod would cost on one node, as the
// books see it: the victims alloc.Victims chooses there.
type nodeCost struct {
	node    string
	victims int
	maxPrio int32
	sumPrio int64
	// nominated: pods already nominated to the node (preempting there).
	nominated int
}

// less orders nodes as preemption prefers them: fewest victims, then the
// lowest highest priority, the lowest sum of priorities, then the node
// fewest preemptors are already waiting for.
func (a nodeCost) less(b nodeCost) bool {
	switch {
	case a.victims != b.victims:
		return a.victims < b.victims
	case a.maxPrio != b.maxPrio:
		return a.maxPrio < b.maxPrio
	case a.sumPrio != b.sumPrio:
		return a.sumPrio < b.sumPrio
	default:
		return a.nominated < b.nominated
	}
}

// cheapest returns up to k nodes of costs, cheapest first; equal costs keep
// the order given (callers rotate it, so that preemptors of equal requests
// spread over equal nodes).
func cheapest(costs []nodeCost, k int) []string {
	sorted := make([]nodeCost, len(costs))
	copy(sorted, costs)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].less(sorted[j]) })
	var out []string
	for _, c := range sorted {
		if len(out) == k {
			break
		}
		out = append(out, c.node)
	}
	return out
}

// nodeView is what the shortlist reads of one node: its pods (from the
// scheduler's snapshot) and the pods nominated to it. A view made from a
// NodeInfo reads them only when the node is costed (load): a full
// cluster's shortlist costs a handful of nodes, not all of them.
type nodeView struct {
	name      string
	pods      []*corev1.Pod
	nominated []*corev1.Pod
	ni        fwk.NodeInfo               // nil: pods and nominated are given
	nom       func(string) []fwk.PodInfo // the nominator (nil: none)
}

// load fills pods and nominated from the NodeInfo, once.
func (v *nodeView) load() {
	if v.ni == nil {
		return
	}
	for _, pi := range v.ni.GetPods() {
		v.pods = append(v.pods, pi.GetPod())
	}
	if v.nom != nil {
		for _, pi := range v.nom(v.name) {
			v.nominated = append(v.nominated, pi.GetPod())
		}
	}
	v.ni = nil
}

// costOn is preempting for pod (req, priority prio) on one node by the
// books: the pods nominated there of at least its priority are placed
// first, pods already terminating count as gone (their preemptor takes
// their place), and the candidates are the node's other lower-priority pods
// no PodDisruptionBudget protects, least important first. ok is false when
// evicting them would not make room, or when none need go (the pod waits
// for terminating pods, not for new victims).
func costOn(a Allocator, pod *corev1.Pod, req *api.PodRequest, v nodeView, protected func(*corev1.Pod) bool) (nodeCost, bool) {
	v.load()
	prio := corev1helpers.PodPriority(pod)
	o := &alloc.Overlay{}
	var cands []*corev1.Pod
	for _, p := range v.pods {
		uid := string(p.UID)
		switch {
		case p.DeletionTimestamp != nil:
			o.Remove(uid, a.Holds(uid, v.name))
		case corev1helpers.PodPriority(p) < prio && !protected(p):
			cands = append(cands, p)
		}
	}
	for _, np := range v.nominated {
		uid := string(np.UID)
		if np.UID == pod.UID || corev1helpers.PodPriority(np) < prio || a.Holds(uid, v.name) {
			continue
		}
		if r, err := api.ParseRequest(np); err == nil && !r.Empty() {
			o.Add(uid, r)
		}
	}
	// Least important first: lowest priority, then the latest started.
	sort.SliceStable(cands, func(i, j int) bool { return schedutil.MoreImportantPod(cands[j], cands[i]) })
	vs := make([]alloc.Victim, len(cands))
	prios := make(map[string]int32, len(cands))
	for i, p := range cands {
		vs[i] = alloc.Victim{UID: string(p.UID), Priority: corev1helpers.PodPriority(p)}
		prios[vs[i].UID] = vs[i].Priority
	}
	uids, err := a.Victims(v.name, req, o, vs)
	if err != nil || len(uids) == 0 {
		return nodeCost{}, false
	}
	c := nodeCost{node: v.name, victims: len(uids), maxPrio: -1 << 31, nominated: len(v.nominated)}
	for _, u := range uids {
		c.maxPrio = max(c.maxPrio, prios[u])
		c.sumPrio += int64(prios[u])
	}
	return c, true
}

// protectedBy reports a pod as protected when a PodDisruptionBudget of its
// namespace selects it and allows no disruption now (the dry run then
// counts the budgets exactly).
func protectedBy(pdbs []*policy.PodDisruptionBudget) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		for _, pdb := range pdbs {
			if pdb.Namespace != p.Namespace || pdb.Status.DisruptionsAllowed > 0 {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err == nil && !sel.Empty() && sel.Matches(labels.Set(p.Labels)) {
				return true
			}
		}
		return false
	}
}

// shortlist names up to shortlistLen nodes where evicting lower-priority
// pods makes room for pod by the books, cheapest first, among the nodes m
// rejected as Unschedulable (a node another plugin rejected for good is not
// one preemption can help). It starts at a random node, so that ties
// spread, and stops early once it holds shortlistLen nodes no other node
// can beat (one victim of the lowest priority there is, nobody nominated):
// in a full cluster it reads a handful of nodes, not all of them.
func (pr *preemptor) shortlist(pod *corev1.Pod, req *api.PodRequest, m fwk.NodeToStatusReader,
	nominated func(string) []fwk.PodInfo) ([]string, error) {
	nis, err := pr.fh.SnapshotSharedLister().NodeInfos().List()
	if err != nil || len(nis) == 0 {
		return nil, err
	}
	var pdbs []*policy.PodDisruptionBudget
	if pr.ev.PdbLister != nil {
		if pdbs, err = pr.ev.PdbLister.List(labels.Everything()); err != nil {
			return nil, err
		}
	}
	views := nodeViews(nis, m, nominated, rand.IntN(len(nis)))
	return cheapestOf(pr.alloc, pod, req, views, protectedBy(pdbs), shortlistLen), nil
}

// nodeViews yields the nodes m gives Unschedulable, starting at off, as
// views that load their pods when costed; nothing is read of the nodes
// the shortlist stops before.
func nodeViews(nis []fwk.NodeInfo, m fwk.NodeToStatusReader, nominated func(string) []fwk.PodInfo, off int) iter.Seq[nodeView] {
	return func(yield func(nodeView) bool) {
		for i := range nis {
			ni := nis[(off+i)%len(nis)]
			name := ni.Node().Name
			if m.Get(name).Code() != fwk.Unschedulable {
				continue
			}
			if !yield(nodeView{name: name, ni: ni, nom: nominated}) {
				return
			}
		}
	}
}

// cheapestOf costs the views in order and returns the k cheapest; it stops
// once k of them cost the least any node can (one victim of the lowest
// priority below pod's of the pods the books hold: victims are chosen among
// those, nobody nominated there).
func cheapestOf(a Allocator, pod *corev1.Pod, req *api.PodRequest, views iter.Seq[nodeView], protected func(*corev1.Pod) bool, k int) []string {
	floor, _ := a.Floor(corev1helpers.PodPriority(pod))
	best := nodeCost{victims: 1, maxPrio: floor, sumPrio: int64(floor)}
	var costs []nodeCost
	unbeatable := 0
	for v := range views {
		c, ok := costOn(a, pod, req, v, protected)
		if !ok {
			continue
		}
		costs = append(costs, c)
		if !best.less(c) {
			if unbeatable++; unbeatable == k {
				break
			}
		}
	}
	return cheapest(costs, k)
}

// preempt runs kube-scheduler's preemption (dry run, choice, nomination,
// eviction) on the shortlisted nodes only; when none of them works out (a
// plugin other than ours, a budget the books' reading missed), over the
// nodes DefaultPreemption would try.
func (pr *preemptor) preempt(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, req *api.PodRequest,
	m fwk.NodeToStatusReader, nominated func(string) []fwk.PodInfo) (*fwk.PostFilterResult, *fwk.Status) {
	// A pod still waiting for its last victims is told so before anything
	// is costed (the dry run would refuse it too, after the shortlist).
	if ok, msg := pr.PodEligibleToPreemptOthers(ctx, pod, m.Get(pod.Status.NominatedNodeName)); !ok {
		return nil, fwk.NewStatus(fwk.Unschedulable, msg)
	}
	nodes, err := pr.shortlist(pod, req, m, nominated)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	if len(nodes) > 0 {
		r, st := pr.ev.Preempt(ctx, state, pod, shortlisted{NodeToStatusReader: m, nodes: nodes})
		if st.IsSuccess() || st.Code() == fwk.Error {
			return r, st
		}
	}
	return pr.ev.Preempt(ctx, state, pod, m)
}

// shortlisted is m with only the shortlisted nodes left to preemption.
type shortlisted struct {
	fwk.NodeToStatusReader
	nodes []string
}

// NodesForStatusCode implements fwk.NodeToStatusReader: of the shortlisted
// nodes, those m gives code.
func (s shortlisted) NodesForStatusCode(l fwk.NodeInfoLister, code fwk.Code) ([]fwk.NodeInfo, error) {
	var out []fwk.NodeInfo
	for _, n := range s.nodes {
		if s.Get(n).Code() != code {
			continue
		}
		ni, err := l.Get(n)
		if err != nil {
			return nil, err
		}
		out = append(out, ni)
	}
	return out, nil
}
