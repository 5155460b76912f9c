package api

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Pod annotations for elastic GPU memory (see ParseElastic). The resource
// gpuslice.io/gpu-memory stays the guarantee, and the only memory the
// scheduler books.
const (
	// AnnotationMemoryMax: the ceiling per GPU, a quantity such as "20Gi"
	// (at least the container's gpuslice.io/gpu-memory). Memory past the
	// guarantee is borrowed from the time-slice daemon while no guarantee needs it.
	AnnotationMemoryMax = Group + "/gpu-memory-max"
	// AnnotationMemorySpill: "host" lets borrowed memory move to host memory
	// when a guarantee needs the room back; "none" (the default) does not.
	AnnotationMemorySpill = Group + "/gpu-memory-spill"
)

// ErrInvalidElastic wraps a malformed elastic memory annotation.
var ErrInvalidElastic = errors.New("invalid gpuslice elastic memory annotation")

// Elastic is a pod's elastic memory: the ceiling per GPU (0: none, the
// guarantee is a plain limit) and whether borrowed memory may spill.
type Elastic struct {
	Max   uint64
	Spill bool
}

// ParseElastic reads a pod's elastic memory annotations.
func ParseElastic(pod *corev1.Pod) (Elastic, error) {
	var e Elastic
	if v, ok := pod.Annotations[AnnotationMemorySpill]; ok {
		switch strings.TrimSpace(v) {
		case "host":
			e.Spill = true
		case "none":
		default:
			return e, fmt.Errorf("%w: %s=%q: want host or none", ErrInvalidElastic, AnnotationMemorySpill, clip(v))
		}
	}
	v, ok := pod.Annotations[AnnotationMemoryMax]
	if !ok {
		if e.Spill {
			return e, fmt.Errorf("%w: %s needs %s", ErrInvalidElastic, AnnotationMemorySpill, AnnotationMemoryMax)
		}
		return e, nil
	}
	q, err := resource.ParseQuantity(strings.TrimSpace(clip(v)))
	if err != nil || q.Sign() <= 0 || len(v) > 64 {
		return e, fmt.Errorf("%w: %s=%q: want a positive quantity such as 20Gi", ErrInvalidElastic, AnnotationMemoryMax, clip(v))
	}
	n, ok := q.AsInt64()
	if !ok {
		return e, fmt.Errorf("%w: %s=%q: not a whole number of bytes", ErrInvalidElastic, AnnotationMemoryMax, clip(v))
	}
	e.Max = uint64(n)
	return e, nil
}
