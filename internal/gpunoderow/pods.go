package gpunoderow

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// PodHoldings reads holdings from the assignment annotations of the
// non-terminated pods bound to Node.
type PodHoldings struct {
	Client kubernetes.Interface
	Node   string
}

// Held implements AllocationReader. Pods with a malformed annotation are
// logged and skipped.
func (h PodHoldings) Held(ctx context.Context) (map[int32]Held, error) {
	pods, err := h.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", h.Node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list pods on %s: %w", h.Node, err)
	}
	return Sum(ctx, h.Node, pods.Items), nil
}

// Sum adds up the assignments of pods on node. A pod that finished, or is
// being deleted (preempted, evicted) and whose containers have all stopped,
// holds nothing: its units are free at the next publication, before the
// kubelet has removed the pod.
func Sum(ctx context.Context, node string, pods []corev1.Pod) map[int32]Held {
	out := map[int32]Held{}
	for i := range pods {
		p := &pods[i]
		raw, ok := p.Annotations[api.AnnotationAssignment]
		if !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || Stopped(p) {
			continue
		}
		a, err := api.ParseAssignment(raw)
		if err == nil && a.Node != node {
			err = fmt.Errorf("assignment names node %q", a.Node)
		}
		if err != nil {
			klog.FromContext(ctx).Error(err, "skipping pod assignment", "pod", klog.KObj(p))
			continue
		}
		for idx, t := range a.Totals() {
			h := out[idx]
			h.Units += t.Units
			h.MemoryBytes += t.MemoryBytes
			out[idx] = h
		}
	}
	return out
}

// Stopped reports whether a pod being deleted has no container left that
// runs or may run: every container the spec names has a terminated status.
func Stopped(p *corev1.Pod) bool {
	if p.DeletionTimestamp == nil {
		return false
	}
	done := map[string]bool{}
	for _, cs := range p.Status.ContainerStatuses {
		done[cs.Name] = cs.State.Terminated != nil
	}
	for _, c := range p.Spec.Containers {
		if !done[c.Name] {
			return false
		}
	}
	return true
}
