package sched

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// draShortlist names up to shortlistLen nodes, cheapest first, where
// evicting lower-priority pods frees a device for a pod with ResourceClaims
// by the numbers alone (alloc.FewestOn on each device of the node, as
// draVictims starts; no allocator run): kube-scheduler's dry run, which runs
// the allocator for every node it tries, then confirms those few instead of
// up to 100 nodes. Ties start at a random node, so a burst spreads; it
// stops once it holds shortlistLen nodes no other can beat (one victim of
// the lowest priority any pod with claims below the pod's has, nobody
// nominated there), as the device-plugin path's shortlist does: in a full
// cluster a preemptor costs a handful of nodes, not all of them. sure:
// no node can beat the first.
func (pr *preemptor) draShortlist(c *cycle, pod *corev1.Pod, m fwk.NodeToStatusReader) (nodes []string, sure bool, err error) {
	nis, err := pr.fh.SnapshotSharedLister().NodeInfos().List()
	if err != nil || len(nis) == 0 {
		return nil, false, err
	}
	var pdbs []*policy.PodDisruptionBudget
	if pr.ev.PdbLister != nil {
		if pdbs, err = pr.ev.PdbLister.List(labels.Everything()); err != nil {
			return nil, false, err
		}
	}
	protected := protectedBy(pdbs)
	prio := corev1helpers.PodPriority(pod)
	floor := pr.draFloor(nis, prio)
	unbeatable := nodeCost{victims: 1, maxPrio: floor, sumPrio: int64(floor)}
	off := rand.IntN(len(nis))
	var costs []nodeCost
	best := 0 // (nodes no other can beat)
	for i := 0; i < len(nis) && best < shortlistLen; i++ {
		ni := nis[(off+i)%len(nis)]
		if m.Get(ni.Node().Name).Code() != fwk.Unschedulable {
			continue
		}
		cost, ok, err := pr.draCostOn(c, ni, prio, protected)
		if err != nil {
			return nil, false, err
		}
		if ok {
			costs = append(costs, cost)
			if !unbeatable.less(cost) {
				best++
			}
		}
	}
	return cheapest(costs, shortlistLen), best > 0, nil
}

// draFloor is the lowest priority below prio of the pods with claims on
// nis (prio when there is none): no victim set costs less than one pod of
// it. Each node's lowest is kept while its NodeInfo's generation stands
// (claimFloors), so a burst of preemptors reads the pods of the nodes that
// changed, not every pod of the cluster per preemptor.
func (pr *preemptor) draFloor(nis []fwk.NodeInfo, prio int32) int32 {
	floor := prio
	pr.floors.mu.Lock()
	defer pr.floors.mu.Unlock()
	if pr.floors.byNode == nil || len(pr.floors.byNode) > 2*len(nis)+16 {
		pr.floors.byNode = make(map[string]nodeFloor, len(nis))
	}
	for _, ni := range nis {
		n := ni.Node()
		if n == nil {
			continue
		}
		f, ok := pr.floors.byNode[n.Name]
		if !ok || f.gen != ni.GetGeneration() {
			f = nodeFloor{gen: ni.GetGeneration(), lowest: lowestClaimPod(ni)}
			pr.floors.byNode[n.Name] = f
		}
		floor = min(floor, f.lowest)
	}
	return floor
}

// claimFloors: per node, the lowest priority of its pods with claims, at
// a generation of its NodeInfo.
type claimFloors struct {
	mu     sync.Mutex
	byNode map[string]nodeFloor
}

type nodeFloor struct {
	gen    int64
	lowest int32 // (math.MaxInt32: no pod with claims)
}

// lowestClaimPod is the lowest priority of ni's pods with claims
// (math.MaxInt32: none).
func lowestClaimPod(ni fwk.NodeInfo) int32 {
	lowest := int32(math.MaxInt32)
	for _, pi := range ni.GetPods() {
		if p := pi.GetPod(); hasClaims(p) {
			lowest = min(lowest, corev1helpers.PodPriority(p))
		}
	}
	return lowest
}

// draCostOn is the cheapest victim set on one node by the numbers (the
// node's pods of lower priority no budget protects, least important first;
// terminating pods count as gone); ok is false when no device there can be
// freed for the pod.
func (pr *preemptor) draCostOn(c *cycle, ni fwk.NodeInfo, prio int32, protected func(*corev1.Pod) bool) (nodeCost, bool, error) {
	n, err := pr.dra.readNode(c.draSnap, ni)
	if err != nil || len(n.slices) == 0 {
		return nodeCost{}, false, err
	}
	gone := sets.New[types.UID]()
	var pods []*corev1.Pod
	for _, pi := range ni.GetPods() {
		p := pi.GetPod()
		switch {
		case p.DeletionTimestamp != nil:
			gone.Insert(p.UID)
		case corev1helpers.PodPriority(p) < prio && !protected(p):
			pods = append(pods, p)
		}
	}
	sort.SliceStable(pods, func(i, j int) bool { return schedutil.MoreImportantPod(pods[j], pods[i]) })
	cands := make([]alloc.Victim, len(pods))
	for i, p := range pods {
		cands[i] = alloc.Victim{UID: string(p.UID), Priority: corev1helpers.PodPriority(p)}
	}
	var best *alloc.VictimSet
	for _, id := range n.deviceIDs() {
		if s, ok := n.cheapestOn(id, c.draNeed, gone, cands, nil); ok && len(s.UIDs) > 0 && s.Better(best) {
			best = &s
		}
	}
	if best == nil {
		return nodeCost{}, false, nil
	}
	name := ni.Node().Name
	return nodeCost{node: name, victims: len(best.UIDs), maxPrio: best.MaxPrio, sumPrio: best.SumPrio,
		nominated: len(pr.fh.NominatedPodsForNode(name))}, true, nil
}

// shortlistTries are the dry runs' node sets for a shortlist, cheapest
// first: when no node can beat the cheapest (sure), it alone first (a DRA
// dry run runs the allocator two or three times per node; the others could
// only tie with it), then the rest; else all of them at once.
func shortlistTries(nodes []string, sure bool) [][]string {
	switch {
	case len(nodes) == 0:
		return nil
	case sure && len(nodes) > 1:
		return [][]string{nodes[:1], nodes[1:]}
	default:
		return [][]string{nodes}
	}
}

// preemptDRA runs kube-scheduler's preemption for a pod with ResourceClaims
// on the shortlisted nodes; when none of them works out, over the nodes
// DefaultPreemption would try.
func (pr *preemptor) preemptDRA(ctx context.Context, c *cycle, state fwk.CycleState, pod *corev1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	nodes, sure, err := pr.draShortlist(c, pod, m)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	for _, try := range shortlistTries(nodes, sure) {
		r, st := pr.ev.Preempt(ctx, state, pod, shortlisted{NodeToStatusReader: m, nodes: try})
		if st.IsSuccess() || st.Code() == fwk.Error {
			return r, st
		}
	}
	return pr.ev.Preempt(ctx, state, pod, m)
}
