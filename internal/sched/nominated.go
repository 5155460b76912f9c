package sched

import (
	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

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
