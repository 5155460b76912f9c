package api

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Annotations and Event reasons of live share changes: a running pod's
// share containers get new units or memory per GPU without a restart. The
// scheduler's resize controller books the change first (all or nothing) and
// rewrites AnnotationAssignment; the node agent applies it.
const (
	// AnnotationUnits: the units of each of its GPUs a share container
	// wants: a bare number (the pod's only share container) or a JSON
	// object of container -> units, e.g. {"main":50}.
	AnnotationUnits = Group + "/units"
	// AnnotationMemory: the memory per GPU a share container wants: a bare
	// quantity ("4Gi") or a JSON object of container -> quantity.
	AnnotationMemory = Group + "/gpu-memory"

	// ReasonShareResized (Normal): the assignment now has the asked share.
	ReasonShareResized = "GPUShareResized"
	// ReasonShareRefused (Warning): the GPU cannot fit the asked share;
	// nothing changed. Retried when capacity frees up.
	ReasonShareRefused = "GPUShareRefused"
	// ReasonShareInvalid (Warning): a malformed AnnotationUnits or
	// AnnotationMemory, or one naming a container without a share.
	ReasonShareInvalid = "GPUShareInvalid"
	// ReasonMemoryOverLimit (Warning, from the node agent): a container
	// holds more GPU memory than its new limit; its new allocations fail
	// until it fits again, nothing is killed.
	ReasonMemoryOverLimit = "GPUMemoryOverLimit"
)

// ErrInvalidShare wraps every malformed AnnotationUnits/AnnotationMemory.
var ErrInvalidShare = errors.New("invalid gpuslice share change")

// ShareValue is one container's asked value ("" Container: the pod's only
// share container).
type ShareValue struct {
	Container string
	Value     int64
}

// ParseUnitsWant strictly parses AnnotationUnits: units 1..DefaultUnitsPerGPU.
func ParseUnitsWant(s string) ([]ShareValue, error) {
	return parseShareWant(AnnotationUnits, s, func(v string) (int64, error) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != v || n < 1 || n > DefaultUnitsPerGPU {
			return 0, fmt.Errorf("units %q: want a decimal 1..%d", v, DefaultUnitsPerGPU)
		}
		return n, nil
	})
}

// ParseMemoryWant strictly parses AnnotationMemory: a positive whole number
// of bytes as a Kubernetes quantity.
func ParseMemoryWant(s string) ([]ShareValue, error) {
	return parseShareWant(AnnotationMemory, s, func(v string) (int64, error) {
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		q, err := resource.ParseQuantity(v)
		n, ok := q.AsInt64()
		if err != nil || !ok || n < 1 {
			return 0, fmt.Errorf("memory %q: want a positive size such as 4Gi", clip(v))
		}
		return n, nil
	})
}

func parseShareWant(ann, s string, value func(string) (int64, error)) ([]ShareValue, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s=%q: "+format, append([]any{ErrInvalidShare, ann, clip(s)}, args...)...)
	}
	if len(s) > MaxGPUsAnnotationBytes {
		return nil, bad("%d bytes, limit %d", len(s), MaxGPUsAnnotationBytes)
	}
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "{") {
		n, err := value(t)
		if err != nil {
			return nil, bad("%w (or an object such as {\"main\":...})", err)
		}
		return []ShareValue{{Value: n}}, nil
	}
	out, err := parseShareObject(t, value)
	if err != nil {
		return nil, bad("%w", err)
	}
	return out, nil
}

// parseShareObject reads {"name": value, ...} (decodeContainerObject).
func parseShareObject(s string, value func(string) (int64, error)) ([]ShareValue, error) {
	var out []ShareValue
	err := decodeContainerObject(s, func(name, raw string) error {
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			return fmt.Errorf("container name %q: %s", clip(name), errs[0])
		}
		n, err := value(raw)
		if err != nil {
			return fmt.Errorf("container %q: %w", name, err)
		}
		out = append(out, ShareValue{Container: name, Value: n})
		return nil
	})
	return out, err
}
