package harness

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// GPURequest is what a test pod asks for.
type GPURequest struct {
	GPUs   int64 // gpuslice.io/gpu
	Units  int64 // gpuslice.io/gpu-units
	Memory int64 // gpuslice.io/gpu-memory, bytes
}

// Pod builds a pending pod for scheduler with one container asking for r.
func Pod(ns, name, scheduler string, r GPURequest) *corev1.Pod {
	limits := corev1.ResourceList{}
	if r.GPUs > 0 {
		limits[api.ResourceGPU] = *resource.NewQuantity(r.GPUs, resource.DecimalSI)
	}
	if r.Units > 0 {
		limits[api.ResourceUnits] = *resource.NewQuantity(r.Units, resource.DecimalSI)
	}
	if r.Memory > 0 {
		limits[api.ResourceMemory] = *resource.NewQuantity(r.Memory, resource.BinarySI)
	}
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			SchedulerName:                 scheduler,
			TerminationGracePeriodSeconds: &zero,
			Tolerations:                   []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.invalid/none:1",
				Resources: corev1.ResourceRequirements{Limits: limits, Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}},
			}},
		},
	}
}
