package sched

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpuslice/gpuslice/pkg/api"
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

// podHint is the queueing hint for Pod events: a pod rejected for lack of
// GPUs is retried when another pod's GPUs may have been released (it was
// deleted or ended, or its assignment changed), when a pod nominated
// somewhere moved or went away (the capacity held for it is free), or when
// the pod itself changed. Status updates of running pods, a victim's
// DisruptionTarget condition or deletion timestamp (it still holds its
// GPUs) and pods of the same burst being nominated are skipped, as is the
// release of another preemptor's victim for a preemptor waiting on its own.
func (p *Plugin) podHint(_ klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	old, _ := oldObj.(*corev1.Pod)
	cur, _ := newObj.(*corev1.Pod)
	switch {
	case cur == nil && old == nil:
		return fwk.Queue, nil
	case cur == nil: // deleted
		return p.freedHint(pod, old), nil
	case cur.UID == pod.UID || old == nil:
		return fwk.Queue, nil
	case old.Spec.NodeName == "": // another pending pod: nominated, or bound
		if on := old.Status.NominatedNodeName; on != "" && on != cur.Status.NominatedNodeName && on != cur.Spec.NodeName {
			return fwk.Queue, nil
		}
		return fwk.QueueSkip, nil
	case ended(cur) && !ended(old):
		return p.freedHint(pod, cur), nil
	case cur.Annotations[api.AnnotationAssignment] != old.Annotations[api.AnnotationAssignment]:
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// freedHint: gone released what it held; pod retries unless it waits for
// victims of its own that gone is not one of.
func (p *Plugin) freedHint(pod, gone *corev1.Pod) fwk.QueueingHint {
	if p.preempt != nil && p.preempt.rec.waitsOnOthers(pod.UID, gone.UID, time.Now()) {
		return fwk.QueueSkip
	}
	return fwk.Queue
}

// ended reports whether the pod's containers are done (its GPUs released).
func ended(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// EventsToRegister: pods rejected for lack of GPUs may fit after a GPUNode
// changes, a pod goes away, a node appears, or the pod itself is updated.
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	gpuNodes := fwk.EventResource(v1alpha2.GPUNodeResource + "." + v1alpha2.Version + "." + api.Group)
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: gpuNodes, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: p.gpuNodeHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete | fwk.Update}, QueueingHintFn: p.podHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add}},
		// A pod with a claim that PreFilter refused (no device with its
		// share free) may fit once a claim is deallocated or a slice
		// changes, as DynamicResources' own refusals.
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Update | fwk.Delete}, QueueingHintFn: claimFreedHint},
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceSlice, ActionType: fwk.Add | fwk.Update}},
	}, nil
}

// claimFreedHint retries a pod when a claim's allocation goes: the claim
// was deallocated, or deleted allocated (or in an unknown final state).
func claimFreedHint(_ klog.Logger, _ *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	old, _ := oldObj.(*resourceapi.ResourceClaim)
	if newObj == nil {
		if old == nil || old.Status.Allocation != nil {
			return fwk.Queue, nil // deleted allocated, or its final state unknown
		}
		return fwk.QueueSkip, nil
	}
	cur, ok := newObj.(*resourceapi.ResourceClaim)
	if !ok {
		return fwk.Queue, fmt.Errorf("unexpected object %T for a ResourceClaim event", newObj)
	}
	if old != nil && old.Status.Allocation != nil && cur.Status.Allocation == nil {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}
