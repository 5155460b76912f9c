package api

import (
	"encoding/json"
	"errors"
	"fmt"
)

// AssignmentVersion is the version of the Assignment JSON this package writes
// and the only one it reads.
const AssignmentVersion = "v1"

// MaxAssignmentBytes bounds the annotation size decoders accept.
const MaxAssignmentBytes = 64 << 10

// ErrInvalidAssignment wraps every decoding and validation failure of an
// assignment annotation.
var ErrInvalidAssignment = errors.New("invalid gpuslice assignment")

// Assignment is the scheduler's decision for one pod, stored as JSON in the
// pod annotation AnnotationAssignment before the pod is bound: which GPUs of
// which node each container gets, and how much of each.
type Assignment struct {
	Version    string                `json:"version"`
	Node       string                `json:"node"`
	Containers []ContainerAssignment `json:"containers"`
}

// ContainerAssignment is the share of GPUs one container gets.
type ContainerAssignment struct {
	Name string          `json:"name"`
	GPUs []GPUAssignment `json:"gpus"`
}

// GPUAssignment is the share of one GPU.
type GPUAssignment struct {
	Index       int32  `json:"index"`
	UUID        string `json:"uuid"`
	Units       int64  `json:"units"`
	MemoryBytes int64  `json:"memoryBytes"`
	// Exclusive marks a whole GPU: nothing else may be placed on it.
	Exclusive bool `json:"exclusive,omitempty"`
}

// Marshal validates a and returns its JSON form.
func (a *Assignment) Marshal() ([]byte, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrInvalidAssignment, err)
	}
	return b, nil
}

// ParseAssignment strictly decodes and validates an assignment annotation:
// unknown fields, trailing data, a missing or unknown version and
// inconsistent contents are all errors wrapping ErrInvalidAssignment.
func ParseAssignment(s string) (*Assignment, error) {
	var a Assignment
	if err := decodeStrict(s, MaxAssignmentBytes, &a); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidAssignment, err)
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return &a, nil
}

// Validate checks the version and the internal consistency of a.
func (a *Assignment) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidAssignment}, args...)...)
	}
	if a.Version != AssignmentVersion {
		return bad("version %q, want %q", a.Version, AssignmentVersion)
	}
	if a.Node == "" {
		return bad("node is empty")
	}
	if len(a.Containers) == 0 {
		return bad("no containers")
	}
	names := make(map[string]bool, len(a.Containers))
	for i, c := range a.Containers {
		if c.Name == "" {
			return bad("containers[%d]: name is empty", i)
		}
		if names[c.Name] {
			return bad("containers[%d]: duplicate name %q", i, c.Name)
		}
		names[c.Name] = true
		if err := validateGPUs(c.GPUs); err != nil {
			return bad("container %q: %w", c.Name, err)
		}
	}
	return nil
}

func validateGPUs(gpus []GPUAssignment) error {
	if len(gpus) == 0 {
		return errors.New("no gpus")
	}
	seen := make(map[int32]bool, len(gpus))
	for _, g := range gpus {
		switch {
		case g.Index < 0:
			return fmt.Errorf("gpu index %d is negative", g.Index)
		case seen[g.Index]:
			return fmt.Errorf("gpu index %d appears twice", g.Index)
		case g.UUID == "":
			return fmt.Errorf("gpu %d: uuid is empty", g.Index)
		case g.Units < 0 || g.MemoryBytes < 0:
			return fmt.Errorf("gpu %d: negative units or memory", g.Index)
		case g.Units == 0 && g.MemoryBytes == 0:
			return fmt.Errorf("gpu %d: neither units nor memory", g.Index)
		}
		seen[g.Index] = true
	}
	return nil
}

// Totals returns, per GPU index, the units and memory the assignment takes
// and whether any share of it is exclusive.
func (a *Assignment) Totals() map[int32]GPUAssignment {
	out := make(map[int32]GPUAssignment)
	for _, c := range a.Containers {
		for _, g := range c.GPUs {
			t := out[g.Index]
			t.Index, t.UUID = g.Index, g.UUID
			t.Units += g.Units
			t.MemoryBytes += g.MemoryBytes
			t.Exclusive = t.Exclusive || g.Exclusive
			out[g.Index] = t
		}
	}
	return out
}
