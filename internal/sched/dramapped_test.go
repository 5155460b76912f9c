package sched

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
)

// TestAsksExtended: asksExtended is true exactly when PodRequests sums an
// extended resource name (what mappedClaim looks for), wherever the pod's
// spec asks for it.
func TestAsksExtended(t *testing.T) {
	rl := func(names ...corev1.ResourceName) corev1.ResourceList {
		l := corev1.ResourceList{}
		for _, n := range names {
			l[n] = resource.MustParse("1")
		}
		return l
	}
	ctr := func(l corev1.ResourceList) []corev1.Container {
		return []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: l}}}
	}
	plain := rl(corev1.ResourceCPU, corev1.ResourceMemory)
	for _, c := range []struct {
		name string
		spec corev1.PodSpec
		want bool
	}{
		{"no requests", corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}, false},
		{"cpu and memory", corev1.PodSpec{Containers: ctr(plain)}, false},
		{"hugepages", corev1.PodSpec{Containers: ctr(rl("hugepages-2Mi"))}, false},
		{"container", corev1.PodSpec{Containers: ctr(rl(corev1.ResourceCPU, "gpuslice.io/gpu"))}, true},
		{"device class prefix", corev1.PodSpec{Containers: ctr(rl("deviceclass.resource.kubernetes.io/gpu"))}, true},
		{"init container", corev1.PodSpec{Containers: ctr(plain), InitContainers: ctr(rl("gpuslice.io/gpu"))}, true},
		{"overhead", corev1.PodSpec{Containers: ctr(plain), Overhead: rl("example.com/thing")}, true},
	} {
		pod := &corev1.Pod{Spec: c.spec}
		summed := false
		for name := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
			summed = summed || schedutil.IsDRAExtendedResourceName(name)
		}
		if got := asksExtended(pod); got != c.want || got != summed {
			t.Errorf("%s: asksExtended %v, want %v (PodRequests sums one: %v)", c.name, got, c.want, summed)
		}
	}
}
