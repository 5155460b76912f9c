package api

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Pod annotations for how a pod's GPU time is sliced on the node (see
// ParseSlicing). A container's share of a GPU's time comes from its units.
const (
	// AnnotationPriority: "high" (online: takes the GPU from low-priority
	// holders at their next kernel boundary) or "low" (offline).
	AnnotationPriority = Group + "/priority"
	// AnnotationSlice: the slice length of containers without units, a Go
	// duration such as "20ms" (100µs..10s).
	AnnotationSlice = Group + "/slice"
)

// Slice priorities.
const (
	PriorityHigh = "high"
	PriorityLow  = "low"
)

// Slice bounds AnnotationSlice accepts (the time-slice daemon's own bounds).
const (
	MinSlice = 100 * time.Microsecond
	MaxSlice = 10 * time.Second
)

// ErrInvalidSlicing wraps a malformed AnnotationPriority or AnnotationSlice.
var ErrInvalidSlicing = errors.New("invalid gpuslice slicing annotation")

// Slicing is how a pod's containers take turns on a GPU.
type Slicing struct {
	// Priority is PriorityHigh or PriorityLow.
	Priority string
	// Slice is the slice length of containers without units (0: the
	// node's default for the priority).
	Slice time.Duration
}

// ParseSlicing reads a pod's slicing. Priority: AnnotationPriority if set,
// else from the pod's PriorityClass: a positive priority value (any
// PriorityClass above the default 0) is high, zero or negative is low.
func ParseSlicing(pod *corev1.Pod) (Slicing, error) {
	var s Slicing
	switch p, ok := pod.Annotations[AnnotationPriority]; {
	case !ok:
		s.Priority = PriorityLow
		if pod.Spec.Priority != nil && *pod.Spec.Priority > 0 {
			s.Priority = PriorityHigh
		}
	case p == PriorityHigh || p == PriorityLow:
		s.Priority = p
	default:
		return s, fmt.Errorf("%w: %s=%q: want %q or %q", ErrInvalidSlicing, AnnotationPriority, clip(p), PriorityHigh, PriorityLow)
	}
	v, ok := pod.Annotations[AnnotationSlice]
	if !ok {
		return s, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < MinSlice || d > MaxSlice {
		return s, fmt.Errorf("%w: %s=%q: want a duration from %v to %v, e.g. 20ms", ErrInvalidSlicing, AnnotationSlice, clip(v), MinSlice, MaxSlice)
	}
	s.Slice = d
	return s, nil
}
