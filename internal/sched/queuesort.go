package sched

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
)

// QueueSortName is the queue-order plugin's name in a
// KubeSchedulerConfiguration (queueSort: it replaces PrioritySort).
const QueueSortName = "GPUSliceQueueSort"

// QueueSort orders kube-scheduler's queue as PrioritySort does (higher
// priority first, then first in, first out), except that among pods of
// equal priority a pod already nominated to a node goes before pods that
// are not. A nominated pod in the active queue is a preemptor back from
// its preemption: the scheduler holds the capacity its victims freed for
// it, and the plugin retries it only once a victim of its own is gone (the
// queueing hint and waiters.go), so its attempt is a cheap one that binds.
// First in, first out put it behind every fresh pod of a burst, each of
// which runs a preemption first, so every preemptor waited for the whole
// burst and the freed capacity stayed held meanwhile.
//
// Less is a strict weak order: lexicographic over (higher priority, nominated,
// earlier queue timestamp), all read from the queued pod itself, which the
// queue re-sorts on every update of the pod; nothing outside the entry
// (books, victims) is consulted, so an entry's place cannot change while it
// sits in the heap. Entries that are not single pods (pod groups) count as
// not nominated. A nominated pod that fails again is put back with the
// scheduler's backoff like any pod, so fresh pods still get their turn.
//
// kube-scheduler has one queue for all profiles: every profile must name the
// same queueSort plugin.
type QueueSort struct{}

var _ fwk.QueueSortPlugin = QueueSort{}

// NewQueueSort is the plugin factory for app.WithPlugin.
func NewQueueSort(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return QueueSort{}, nil
}

// Name implements fwk.Plugin.
func (QueueSort) Name() string { return QueueSortName }

// Less implements fwk.QueueSortPlugin.
func (QueueSort) Less(a, b fwk.QueuedEntityInfo) bool {
	pa, pb := a.GetPriority(), b.GetPriority()
	if pa != pb {
		return pa > pb
	}
	if na, nb := nominated(a), nominated(b); na != nb {
		return na
	}
	return a.GetTimestamp().Before(b.GetTimestamp())
}

// nominated reports whether the entry is a single pod nominated to a node.
func nominated(e fwk.QueuedEntityInfo) bool {
	if e.Type() != fwk.PodKeyType {
		return false
	}
	pi, ok := e.(interface{ GetPodInfo() fwk.PodInfo })
	if !ok || pi.GetPodInfo() == nil {
		return false
	}
	p := pi.GetPodInfo().GetPod()
	return p != nil && p.Status.NominatedNodeName != ""
}
