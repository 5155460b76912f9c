package sched

import (
	"context"
	"math/rand/v2"
	"sort"

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
// up to 100 nodes. Ties start at a random node, so a burst spreads.
func (pr *preemptor) draShortlist(c *cycle, pod *corev1.Pod, m fwk.NodeToStatusReader) ([]string, error) {
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
	protected := protectedBy(pdbs)
	prio := corev1helpers.PodPriority(pod)
	off := rand.IntN(len(nis))
	var costs []nodeCost
	for i := range nis {
		ni := nis[(off+i)%len(nis)]
		if m.Get(ni.Node().Name).Code() != fwk.Unschedulable {
			continue
		}
		n, err := pr.dra.readNode(c.draSnap, ni.Node())
		if err != nil {
			return nil, err
		}
		if len(n.slices) == 0 {
			continue
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
		if best != nil {
			costs = append(costs, nodeCost{node: ni.Node().Name, victims: len(best.UIDs), maxPrio: best.MaxPrio, sumPrio: best.SumPrio})
		}
	}
	return cheapest(costs, shortlistLen), nil
}

// preemptDRA runs kube-scheduler's preemption for a pod with ResourceClaims
// on the shortlisted nodes; when none of them works out, over the nodes
// DefaultPreemption would try.
func (pr *preemptor) preemptDRA(ctx context.Context, c *cycle, state fwk.CycleState, pod *corev1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	nodes, err := pr.draShortlist(c, pod, m)
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
