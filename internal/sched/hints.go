package sched

import (
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// rowMayAdmitMore reports whether a GPUNode change can let a pod in that did
// not fit before: a new row, a new state, changed GPUs, or a heartbeat that
// was stale (older than timeout at now). A heartbeat refresh of a fresh,
// otherwise unchanged row cannot, and at thousands of nodes those are most
// updates.
func rowMayAdmitMore(old, cur *v1alpha2.GPUNode, timeout time.Duration, now time.Time) bool {
	if old == nil || cur == nil {
		return old == nil && cur != nil
	}
	if old.Status.State != cur.Status.State || !apiequality.Semantic.DeepEqual(old.Status.GPUs, cur.Status.GPUs) {
		return true
	}
	return now.Sub(old.Status.UpdateTime.Time) > timeout
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
	if rowMayAdmitMore(old, cur, p.heartbeatTimeout, p.now()) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}
