package sched

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
)

// Pods whose devices come from the extended-resource mapping (a DeviceClass
// with extendedResourceName, KEP-5004): a pod asking for gpuslice.io/gpu
// where a class maps it has no ResourceClaim until the DynamicResources
// plugin makes one in PreBind (named in the pod's
// status.extendedResourceClaimStatus). Until then the DRA path counts, in
// its place, the claim the plugin would make: for each mapped resource a
// request of that many whole devices of the class (no capacity request:
// each device is consumed whole, docs/dra.md). With it the pod is placed,
// preempted for and held for as a pod with a claim from a template.

// mappedClaimUID marks the stand-in claim of a pod (no claim of the API
// server has it: the draFlights wait on it ends at once).
func mappedClaimUID(pod *corev1.Pod) types.UID { return pod.UID + "-extended-resources" }

// mappedClaim is the stand-in for the claim the DynamicResources plugin
// will make for pod's mapped extended resources; nil when the pod has its
// claim already or asks for no mapped resource.
func (e *draEnv) mappedClaim(pod *corev1.Pod) *resourceapi.ResourceClaim {
	if e == nil || pod.Status.ExtendedResourceClaimStatus != nil && pod.Status.ExtendedResourceClaimStatus.ResourceClaimName != "" {
		return nil
	}
	classes := e.dra.DeviceClassResolver()
	if classes == nil || !asksExtended(pod) {
		return nil
	}
	var reqs []resourceapi.DeviceRequest
	for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
		n, ok := q.AsInt64()
		if !ok || n <= 0 || !schedutil.IsDRAExtendedResourceName(name) {
			continue
		}
		if dc := classes.GetDeviceClass(name); dc != nil {
			reqs = append(reqs, resourceapi.DeviceRequest{Name: fmt.Sprintf("mapped-%d", len(reqs)), Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: dc.Name, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: n}})
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	slices.SortFunc(reqs, func(a, b resourceapi.DeviceRequest) int {
		return strings.Compare(a.Exactly.DeviceClassName, b.Exactly.DeviceClassName)
	})
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name + "-extended-resources",
		UID: mappedClaimUID(pod)}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}}}
}

// asksExtended reports whether pod's spec requests a resource the mapping
// may serve (an extended resource name, as PodRequests would sum it: the
// containers', init containers', pod-level and overhead requests): most
// claim pods do not, and the sum is not made for them (a map per call).
func asksExtended(pod *corev1.Pod) bool {
	ext := func(l corev1.ResourceList) bool {
		for name := range l {
			if schedutil.IsDRAExtendedResourceName(name) {
				return true
			}
		}
		return false
	}
	for i := range pod.Spec.Containers {
		if ext(pod.Spec.Containers[i].Resources.Requests) {
			return true
		}
	}
	for i := range pod.Spec.InitContainers {
		if ext(pod.Spec.InitContainers[i].Resources.Requests) {
			return true
		}
	}
	return ext(pod.Spec.Overhead) || pod.Spec.Resources != nil && ext(pod.Spec.Resources.Requests)
}

// usesClaims reports whether pod's devices come from ResourceClaims: its
// own, or the mapping's.
func (e *draEnv) usesClaims(pod *corev1.Pod) bool {
	return hasClaims(pod) || e.mappedClaim(pod) != nil
}

// servesMapped names a mapped resource of pod that node advertises itself
// (a device plugin serves it there: the mapping does not apply, no claim
// would be made, and the books' GPUs are not the DRA path's), or "".
func (e *draEnv) servesMapped(pod *corev1.Pod, ni fwk.NodeInfo) corev1.ResourceName {
	if e.mappedClaim(pod) == nil {
		return ""
	}
	alloc := ni.Node().Status.Allocatable
	for name := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
		if q, ok := alloc[name]; ok && !q.IsZero() && e.dra.DeviceClassResolver().GetDeviceClass(name) != nil {
			return name
		}
	}
	return ""
}

// draEnv is the DRA path's view (nil: no DRA).
func (p *Plugin) draEnv() *draEnv {
	if p.preempt == nil {
		return nil
	}
	return p.preempt.dra
}
