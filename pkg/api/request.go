package api

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// MaxGPUsPerContainer bounds ResourceGPU in one container.
const MaxGPUsPerContainer = 64

// ErrInvalidRequest wraps every error about a pod's gpuslice resources.
var ErrInvalidRequest = errors.New("invalid gpuslice request")

// ContainerRequest is what one container asks for.
type ContainerRequest struct {
	Name string
	// Count is the number of distinct GPUs.
	Count int
	// Whole: exclusive GPUs (all their units and memory); Units and
	// MemoryBytes are then zero.
	Whole bool
	// Units and MemoryBytes are the share asked on each of the Count GPUs.
	Units       int64
	MemoryBytes int64
}

// PodRequest is what a pod asks for: its containers that request gpuslice
// resources, in spec order, and its placement override ("" = cluster default).
type PodRequest struct {
	Containers []ContainerRequest
	Placement  Placement
	// Sharing is the sharing mode the pod's GPUs must have ("" = either).
	Sharing SharingMode
}

// Empty reports whether the pod asks for no gpuslice resources.
func (r *PodRequest) Empty() bool { return len(r.Containers) == 0 }

// ParseRequest reads the gpuslice resources and placement annotation of pod.
// A pod without any returns an empty request and no error. Unknown names in
// the gpuslice.io domain, fractional or negative amounts, requests that
// disagree with limits, and gpuslice resources on init containers are errors
// wrapping ErrInvalidRequest.
func ParseRequest(pod *corev1.Pod) (*PodRequest, error) {
	out := &PodRequest{}
	if p, ok := pod.Annotations[AnnotationPlacement]; ok {
		if !Placement(p).Valid() {
			return nil, fmt.Errorf("%w: annotation %s=%q, want one of %v", ErrInvalidRequest, AnnotationPlacement, p, Placements())
		}
		out.Placement = Placement(p)
	}
	sharing, err := ParseSharing(pod)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	out.Sharing = sharing
	for _, c := range pod.Spec.InitContainers {
		if hasGPUSlice(c.Resources) {
			return nil, fmt.Errorf("%w: init container %q: gpuslice resources are only supported on regular containers", ErrInvalidRequest, c.Name)
		}
	}
	for _, c := range pod.Spec.Containers {
		cr, err := parseContainer(c)
		if err != nil {
			return nil, fmt.Errorf("%w: container %q: %w", ErrInvalidRequest, c.Name, err)
		}
		if cr != nil {
			out.Containers = append(out.Containers, *cr)
		}
	}
	if !out.Empty() {
		if _, err := ParseSlicing(pod); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
	}
	return out, nil
}

func hasGPUSlice(r corev1.ResourceRequirements) bool {
	for name := range r.Limits {
		if IsGPUSliceResource(name) {
			return true
		}
	}
	for name := range r.Requests {
		if IsGPUSliceResource(name) {
			return true
		}
	}
	return false
}

// amounts merges limits and requests of gpuslice resources, checking that
// both agree where both are set.
func amounts(r corev1.ResourceRequirements) (map[corev1.ResourceName]resource.Quantity, error) {
	out := map[corev1.ResourceName]resource.Quantity{}
	for name, q := range r.Limits {
		if IsGPUSliceResource(name) {
			out[name] = q
		}
	}
	for name, q := range r.Requests {
		if !IsGPUSliceResource(name) {
			continue
		}
		if l, ok := out[name]; ok && l.Cmp(q) != 0 {
			return nil, fmt.Errorf("%s: request %s differs from limit %s", name, q.String(), l.String())
		}
		out[name] = q
	}
	for name := range out {
		if name != ResourceGPU && name != ResourceMemory && name != ResourceUnits {
			return nil, fmt.Errorf("unknown resource %s, want %s, %s or %s", name, ResourceGPU, ResourceMemory, ResourceUnits)
		}
	}
	return out, nil
}

func integer(name corev1.ResourceName, q resource.Quantity) (int64, error) {
	v, ok := q.AsInt64()
	if !ok || v < 0 {
		return 0, fmt.Errorf("%s=%s: want a non-negative whole number", name, q.String())
	}
	return v, nil
}

func parseContainer(c corev1.Container) (*ContainerRequest, error) {
	am, err := amounts(c.Resources)
	if err != nil || len(am) == 0 {
		return nil, err
	}
	var v [3]int64
	for i, name := range []corev1.ResourceName{ResourceGPU, ResourceUnits, ResourceMemory} {
		if q, ok := am[name]; ok {
			if v[i], err = integer(name, q); err != nil {
				return nil, err
			}
		}
	}
	count, units, mem := v[0], v[1], v[2]
	if count > MaxGPUsPerContainer {
		return nil, fmt.Errorf("%s=%d: at most %d", ResourceGPU, count, MaxGPUsPerContainer)
	}
	cr := &ContainerRequest{Name: c.Name, Count: int(count), Units: units, MemoryBytes: mem}
	switch {
	case units == 0 && mem == 0 && count == 0:
		return nil, nil // explicitly zero: asks for nothing
	case units == 0 && mem == 0:
		cr.Whole = true
	case count == 0:
		cr.Count = 1
	}
	return cr, nil
}
