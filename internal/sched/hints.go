package sched

import (
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// rowMayAdmitMore reports whether a GPUNode change can let a pod in that did
// not fit before: a new row, a new state or changed GPUs. (A node coming
// back to life is its Lease's renewal, which the plugin's Lease handler
// acts on.)
func rowMayAdmitMore(old, cur *v1alpha2.GPUNode) bool {
	if old == nil || cur == nil {
		return old == nil && cur != nil
	}
	return old.Status.State != cur.Status.State || !apiequality.Semantic.DeepEqual(old.Status.GPUs, cur.Status.GPUs)
}

// gpuNodeHint is the queueing hint for GPUNode events.
func (p *Plugin) gpuNodeHint(_ klog.Logger, _ *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	var old, cur *v1alpha2.GPUNode
	var err error
	if oldObj != nil {
		if old, err = gpuNodeFrom(oldObj); err != nil {
			return fwk.Queue, err
		}
	}
	if newObj != nil {
		if cur, err = gpuNodeFrom(newObj); err != nil {
			return fwk.Queue, err
		}
	}
	if rowMayAdmitMore(old, cur) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}
