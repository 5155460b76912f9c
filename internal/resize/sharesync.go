package resize

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// wantsChange: the pod asks for a GPU count or a share change.
func wantsChange(pod *corev1.Pod) bool {
	return pod.Annotations[api.AnnotationGPUs] != "" || pod.Annotations[api.AnnotationUnits] != "" || pod.Annotations[api.AnnotationMemory] != ""
}

// syncShares books and writes the share change the pod asks for (all or
// nothing). done: it wrote a new assignment (the pod's update brings the
// next pass) or must stop; otherwise the GPU-count resize goes on.
func (c *Controller) syncShares(ctx context.Context, pod *corev1.Pod, raw string, a *api.Assignment) (done bool, err error) {
	units, memory := pod.Annotations[api.AnnotationUnits], pod.Annotations[api.AnnotationMemory]
	if units == "" && memory == "" {
		return false, nil
	}
	want, err := ParseShareWant(units, memory, a)
	if err != nil {
		c.report(pod, corev1.EventTypeWarning, api.ReasonShareInvalid, err.Error())
		return false, nil
	}
	to, changed := PlanShares(a, want)
	if !changed {
		return false, nil
	}
	uid := string(pod.UID)
	if err := c.books.BeginShareResize(uid, raw, a, to); err != nil {
		if errors.Is(err, ErrNoRoom) {
			c.report(pod, corev1.EventTypeWarning, api.ReasonShareRefused, fmt.Sprintf("share stays %s: %v", shares(a), err))
			return false, nil // the resync retries when capacity frees up
		}
		return true, fmt.Errorf("book share change: %w", err)
	}
	b, err := to.Marshal()
	if err != nil {
		c.books.EndResize(uid, "", false)
		return true, err
	}
	err = c.patch(ctx, pod, b)
	c.books.EndResize(uid, string(b), err == nil)
	if apierrors.IsConflict(err) {
		return true, nil // the pod's update queues it again
	}
	if err != nil {
		return true, err
	}
	klog.FromContext(ctx).Info("share changed", "pod", klog.KObj(pod), "node", a.Node, "from", shares(a), "to", shares(to))
	c.report(pod, corev1.EventTypeNormal, api.ReasonShareResized, "share now "+shares(to))
	return true, nil
}

// shares renders each share container's units and memory per GPU.
func shares(a *api.Assignment) string {
	var parts []string
	for _, c := range a.Containers {
		if len(c.GPUs) == 0 || c.GPUs[0].Exclusive {
			continue
		}
		g := c.GPUs[0]
		parts = append(parts, fmt.Sprintf("%s=%d units, %d bytes per GPU", c.Name, g.Units, g.MemoryBytes))
	}
	return strings.Join(parts, "; ")
}
