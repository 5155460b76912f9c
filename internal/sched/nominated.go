package sched

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// fitsNominated returns the node a preemptor was nominated to when the pod
// fits there by the books, counting what is held for the other nominated
// pods of at least its priority as Filter will ("" otherwise). kube-scheduler
// tries the nominated node before any other (evaluateNominatedNode in
// schedule_one.go) and takes it when it passes Filter, so PreFilter need not
// rank every node for a preemptor back from its preemption: handing over
// that node alone decides the same and costs one node's check instead of a
// ranking of the cluster. If another plugin rejects the node, PostFilter
// widens the pod to every node as for any narrowed cycle.
func (p *Plugin) fitsNominated(pod *corev1.Pod, req *api.PodRequest) string {
	node := pod.Status.NominatedNodeName
	if node == "" {
		return ""
	}
	var err error
	if o := p.heldFor(pod, node); o != nil {
		err = p.alloc.CheckWith(node, req, o)
	} else {
		err = p.alloc.Check(node, req)
	}
	if err != nil {
		return ""
	}
	return node
}

// held is, per node a preemptor was nominated to, the capacity held there
// for the nominated pods of at least pod's priority, as Filter will count
// it: PreFilter then hands over no node whose freed GPUs wait for their
// preemptor (Filter would reject it, and the pod would retry on every
// node) and rejects the pod at once when only such nodes have room.
func (p *Plugin) held(pod *corev1.Pod) map[string]*alloc.Overlay {
	if p.preempt == nil {
		return nil
	}
	return p.preempt.rec.held(pod.UID, corev1helpers.PodPriority(pod), p.alloc.Holds)
}

// heldFor is what Reserve leaves for the pods nominated to node of at least
// the pod's priority (they preempted for it: Filter counted them too), so
// that the GPUs chosen now are not the ones they need.
func (p *Plugin) heldFor(pod *corev1.Pod, node string) *alloc.Overlay {
	if p.nominated == nil {
		return nil
	}
	var o *alloc.Overlay
	prio := corev1helpers.PodPriority(pod)
	for _, pi := range p.nominated(node) {
		np := pi.GetPod()
		uid := string(np.UID)
		if np.UID == pod.UID || corev1helpers.PodPriority(np) < prio || p.alloc.Holds(uid, node) {
			continue
		}
		if req, err := api.ParseRequest(np); err == nil && !req.Empty() {
			if o == nil {
				o = &alloc.Overlay{}
			}
			o.Add(uid, req)
		}
	}
	return o
}

// maxHeldChecks bounds the stock allocator's runs draUnheld spends on
// candidates that pods nominated there may hold; past it the candidates go
// to Filter unchecked.
const maxHeldChecks = 16

// draUnheld names up to k of cands (nodes with a device that has the pod's
// share free, best first: draCandidates) whose free capacity is not all
// held for the pods nominated there (of at least pod's priority, not bound:
// Filter holds it for them, filterDRA): a node with such pods is kept only
// if the stock allocator fits their pending claims and the pod's there
// together. In a burst of preemptors the shares their victims freed are
// such held capacity: handing those nodes to Filter ended, for each fresh
// preemptor, in every candidate refused and a retry on every node (the
// allocator run on each) before it could preempt. With none left PreFilter
// refuses the pod, naming the pods the share is held for (heldRefusal);
// heldBy names them for the nodes left out.
func (p *Plugin) draUnheld(c *cycle, pod *corev1.Pod, nodes []fwk.NodeInfo, cands []string, k int) (out, heldBy []string, err error) {
	var byName map[string]*corev1.Node // (made only for a candidate with held capacity: most have none)
	env := p.preempt.dra
	var own []*resourceapi.ResourceClaim
	checks := 0
	for _, n := range cands {
		if len(out) == k {
			break
		}
		held, who := p.preempt.heldFor(pod, n)
		if len(held) > 0 && byName == nil {
			byName = nodesNamed(nodes, cands)
			own, _ = env.pendingClaims(pod)
		}
		if len(held) == 0 || checks == maxHeldChecks || byName[n] == nil {
			out = append(out, n)
			continue
		}
		all := append(held, own...)
		ok := false
		if !c.draFilter.roomless(env, c.draState, n, all) {
			checks++
			// (the allocator takes a context for its logger only; PreFilter's
			// own does not reach here)
			if ok, err = c.draFilter.fits(context.Background(), env, c.draState, byName[n], all); err != nil {
				return nil, nil, err
			}
		}
		if ok {
			out = append(out, n)
		} else {
			heldBy = append(heldBy, who...)
		}
	}
	return out, heldBy, nil
}

// nodesNamed are the nodes of nis named in names.
func nodesNamed(nis []fwk.NodeInfo, names []string) map[string]*corev1.Node {
	byName := make(map[string]*corev1.Node, len(names))
	for _, n := range names {
		byName[n] = nil
	}
	for _, ni := range nis {
		if _, ok := byName[ni.Node().Name]; ok {
			byName[ni.Node().Name] = ni.Node()
		}
	}
	return byName
}

// heldRefusal is PreFilter's refusal of a pod of namespace ns whose share
// is free only in capacity held for the pods heldBy (namespace/name),
// nominated to those nodes and waiting there for their preemptions'
// victims (not errNoShare: the share is free, but taken). Up to three of
// them of ns are named; those of other namespaces are only counted (the
// pod's owner may not see them).
func heldRefusal(ns string, heldBy []string) string {
	const named = 3
	if len(heldBy) == 0 {
		return errNoShare.Error()
	}
	var parts []string
	mine, others := 0, 0
	for _, w := range heldBy {
		if !strings.HasPrefix(w, ns+"/") {
			others++
			continue
		}
		if mine < named {
			parts = append(parts, w)
		}
		mine++
	}
	if mine > named {
		parts = append(parts, fmt.Sprintf("%d more", mine-named))
	}
	switch {
	case others == 1:
		parts = append(parts, "1 pod in another namespace")
	case others > 1:
		parts = append(parts, fmt.Sprintf("%d pods in other namespaces", others))
	}
	who := parts[len(parts)-1]
	if len(parts) > 1 {
		who = strings.Join(parts[:len(parts)-1], ", ") + " and " + who
	}
	return "gpuslice: the claim's share is free only in capacity held for pods nominated there, which wait for their preemption victims (" +
		who + "); the pod preempts for its own"
}

// roomless reports whether claims, gpuslice.io shares all (narrowable), ask
// in sum for more units or memory than node's shared devices have free in
// st (untainted ones, summed): then they cannot be allocated there
// together, and no allocator run is needed to say so. Any other shape of
// claim: false (the allocator decides).
func (v *draFilterView) roomless(e *draEnv, st *structured.AllocatedState, node string, claims []*resourceapi.ResourceClaim) bool {
	if !narrowable(claims) || v.read(e, st) != nil {
		return false
	}
	var needUnits, needBytes, freeUnits, freeBytes int64
	for _, c := range claims {
		for _, r := range c.Spec.Devices.Requests {
			u, m := r.Exactly.Capacity.Requests[capUnits], r.Exactly.Capacity.Requests[capMemory]
			needUnits, needBytes = needUnits+u.Value(), needBytes+m.Value()
		}
	}
	for _, s := range v.slices[node] { // (not through e.table: its cache is for the whole list)
		for _, d := range s.Spec.Devices {
			sd := sharedDev{units: deviceCap(d, capUnits), mem: deviceCap(d, capMemory)}
			if sd.units == 0 || sd.mem == 0 || len(d.Taints) > 0 {
				continue
			}
			sd.id = structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name)
			u, m := consumed(v.st, sd)
			freeUnits, freeBytes = freeUnits+sd.units-u, freeBytes+sd.mem-m
		}
	}
	return needUnits > freeUnits || needBytes > freeBytes
}

// steeredUnheld is narrowDRA's result when the DynamicResources plugin's
// allocator was shown the candidates' slices alone (drasteer.go): the
// candidates less those whose free share is held for nominated pods; none
// left of a complete list (fewer than asked) refuses the pod (heldRefusal);
// none left of a full list hands over the list as it is (others may have
// room: Filter decides).
func (p *Plugin) steeredUnheld(c *cycle, pod *corev1.Pod, claims []*resourceapi.ResourceClaim, nodes []fwk.NodeInfo, names []string) (*fwk.PreFilterResult, *fwk.Status) {
	k := min(p.candidates, draCandidateNodes)
	out, heldBy, err := p.draUnheld(c, pod, nodes, names, k)
	switch {
	case err != nil || len(out) == 0 && len(names) >= k:
		return &fwk.PreFilterResult{NodeNames: sets.New(names...)}, nil
	case len(out) == 0 && len(claims) == 1 && len(claims[0].Spec.Devices.Requests) == 1:
		c.narrowed = false
		return nil, fwk.NewStatus(fwk.Unschedulable, heldRefusal(pod.Namespace, heldBy))
	case len(out) == 0:
		return &fwk.PreFilterResult{NodeNames: sets.New(names...)}, nil
	}
	return &fwk.PreFilterResult{NodeNames: sets.New(out...)}, nil
}
