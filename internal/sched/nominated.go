package sched

import (
	corev1 "k8s.io/api/core/v1"

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
