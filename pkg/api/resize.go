package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Annotations and Event reasons of in-place GPU resize (hot add/remove).
const (
	// AnnotationGPUs is written by users: how many whole GPUs a running
	// pod's containers want (see ParseGPUs). The scheduler's resize
	// controller grants or releases GPUs and rewrites AnnotationAssignment.
	AnnotationGPUs = Group + "/gpus"
	// AnnotationApplied is written by the node agent: the JSON Applied, the
	// GPUs each running container can use now.
	AnnotationApplied = Group + "/applied"

	// ReasonGPUResized (Normal): the assignment now matches AnnotationGPUs.
	ReasonGPUResized = "GPUResized"
	// ReasonGPUResizePartial (Warning): the node is short of free GPUs;
	// the message says how many are still missing. Granted later when
	// GPUs free up.
	ReasonGPUResizePartial = "GPUResizePartial"
	// ReasonGPUResizeInvalid (Warning): AnnotationGPUs is malformed or
	// names containers that do not hold whole GPUs.
	ReasonGPUResizeInvalid = "GPUResizeInvalid"
)

// MaxGPUsAnnotationBytes bounds the AnnotationGPUs value parsers accept.
const MaxGPUsAnnotationBytes = 4 << 10

// ErrInvalidGPUs wraps every malformed AnnotationGPUs value.
var ErrInvalidGPUs = errors.New("invalid gpuslice GPU count")

// GPUCount is one entry of AnnotationGPUs: Count whole GPUs for Container
// ("" in the bare form: the pod's only whole-GPU container).
type GPUCount struct {
	Container string
	Count     int
}

// ParseGPUs strictly parses an AnnotationGPUs value, which is JSON: either a
// bare count (`3`: the pod's only whole-GPU container) or an object of
// container name -> count (`{"main":3,"side":1}`), each container named once.
// Counts are integers 1..MaxGPUsPerContainer; names are container names
// (DNS-1123 labels). Errors wrap ErrInvalidGPUs. FormatGPUs writes the compact
// form back.
func ParseGPUs(s string) ([]GPUCount, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s=%q: "+format, append([]any{ErrInvalidGPUs, AnnotationGPUs, clip(s)}, args...)...)
	}
	if len(s) > MaxGPUsAnnotationBytes {
		return nil, bad("%d bytes, limit %d", len(s), MaxGPUsAnnotationBytes)
	}
	if !strings.HasPrefix(strings.TrimSpace(s), "{") {
		n, err := parseCount(strings.TrimSpace(s))
		if err != nil {
			return nil, bad("%w (or an object such as {\"main\":2})", err)
		}
		return []GPUCount{{Count: n}}, nil
	}
	out, err := parseGPUObject(s)
	if err != nil {
		return nil, bad("%w", err)
	}
	return out, nil
}

// parseGPUObject reads {"name": count, ...} (decodeContainerObject).
func parseGPUObject(s string) ([]GPUCount, error) {
	var out []GPUCount
	err := decodeContainerObject(s, func(name, raw string) error {
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			return fmt.Errorf("container name %q: %s", clip(name), errs[0])
		}
		n, err := parseCount(raw)
		if err != nil {
			return fmt.Errorf("container %q: %w", name, err)
		}
		out = append(out, GPUCount{Container: name, Count: n})
		return nil
	})
	return out, err
}

func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || s != strconv.Itoa(n) || n < 1 || n > MaxGPUsPerContainer {
		return 0, fmt.Errorf("count %q: want a decimal 1..%d", s, MaxGPUsPerContainer)
	}
	return n, nil
}

// FormatGPUs writes counts in the compact AnnotationGPUs form.
func FormatGPUs(counts []GPUCount) string {
	if len(counts) == 1 && counts[0].Container == "" {
		return strconv.Itoa(counts[0].Count)
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, c := range counts {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%d", c.Container, c.Count)
	}
	b.WriteByte('}')
	return b.String()
}

// clip shortens a value quoted in an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// AppliedVersion is the version of the Applied JSON.
const AppliedVersion = "v1"

// MaxAppliedBytes bounds the AnnotationApplied value parsers accept.
const MaxAppliedBytes = 64 << 10

// ErrInvalidApplied wraps every decoding and validation failure of an
// AnnotationApplied value.
var ErrInvalidApplied = errors.New("invalid gpuslice applied state")

// Applied is the node agent's report on a pod (AnnotationApplied): the GPUs
// each running container can use now, as read back from the kernel after
// applying the assignment.
type Applied struct {
	Version    string             `json:"version"`
	Containers []AppliedContainer `json:"containers"`
	// Error is the last failure applying the assignment ("" if none).
	Error string `json:"error,omitempty"`
}

// AppliedContainer is one container's applied GPUs (indices).
type AppliedContainer struct {
	Name string  `json:"name"`
	GPUs []int32 `json:"gpus"`
}

// Marshal validates a and returns its canonical JSON form: the current
// version, containers in name order, GPU indices ascending, never null.
func (a Applied) Marshal() (string, error) {
	out := Applied{Version: AppliedVersion, Error: a.Error, Containers: make([]AppliedContainer, len(a.Containers))}
	for i, c := range a.Containers {
		g := slices.Clone(c.GPUs)
		if g == nil {
			g = []int32{}
		}
		slices.Sort(g)
		out.Containers[i] = AppliedContainer{Name: c.Name, GPUs: g}
	}
	slices.SortFunc(out.Containers, func(x, y AppliedContainer) int { return strings.Compare(x.Name, y.Name) })
	if err := out.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("%w: encode: %w", ErrInvalidApplied, err)
	}
	return string(b), nil
}

// ParseApplied strictly decodes and validates an AnnotationApplied value:
// unknown fields, trailing data, a missing or other version and
// inconsistent contents are errors wrapping ErrInvalidApplied.
func ParseApplied(s string) (*Applied, error) {
	var a Applied
	if err := decodeStrict(s, MaxAppliedBytes, &a); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidApplied, err)
	}
	if a.Containers == nil {
		return nil, fmt.Errorf("%w: containers missing", ErrInvalidApplied)
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return &a, nil
}

// Validate checks the version and the consistency of a: container names
// are valid and unique, GPU indices non-negative and unique per container.
func (a *Applied) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidApplied}, args...)...)
	}
	if a.Version != AppliedVersion {
		return bad("version %q, want %q", a.Version, AppliedVersion)
	}
	names := make(map[string]bool, len(a.Containers))
	for i, c := range a.Containers {
		if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
			return bad("containers[%d]: name %q: %s", i, c.Name, errs[0])
		}
		if names[c.Name] {
			return bad("containers[%d]: duplicate name %q", i, c.Name)
		}
		names[c.Name] = true
		if c.GPUs == nil {
			return bad("container %q: gpus missing", c.Name)
		}
		seen := make(map[int32]bool, len(c.GPUs))
		for _, g := range c.GPUs {
			if g < 0 || seen[g] {
				return bad("container %q: gpu index %d negative or repeated", c.Name, g)
			}
			seen[g] = true
		}
	}
	return nil
}

// GPUsOf returns the applied GPU indices of a container, and whether the
// report names it.
func (a *Applied) GPUsOf(container string) ([]int32, bool) {
	for _, c := range a.Containers {
		if c.Name == container {
			return c.GPUs, true
		}
	}
	return nil, false
}
