package agent

import (
	"encoding/json"
	"fmt"
	"slices"
)

// AppliedVersion is the version of the Applied JSON.
const AppliedVersion = "v1"

// Applied is the node agent's report on a pod (annotation
// resize.AnnotationApplied): the GPUs each running container can use now,
// as read back from the kernel after applying the assignment.
type Applied struct {
	Version    string             `json:"version"`
	Containers []AppliedContainer `json:"containers"`
	// Error is the last failure applying the assignment ("" if none).
	Error string `json:"error,omitempty"`
}

// AppliedContainer is one container's applied GPUs (indices, ascending).
type AppliedContainer struct {
	Name string  `json:"name"`
	GPUs []int32 `json:"gpus"`
}

// Marshal returns the JSON form with containers in name order.
func (a Applied) Marshal() (string, error) {
	a.Version = AppliedVersion
	slices.SortFunc(a.Containers, func(x, y AppliedContainer) int {
		if x.Name < y.Name {
			return -1
		}
		if x.Name > y.Name {
			return 1
		}
		return 0
	})
	for i := range a.Containers {
		if a.Containers[i].GPUs == nil {
			a.Containers[i].GPUs = []int32{}
		}
		slices.Sort(a.Containers[i].GPUs)
	}
	b, err := json.Marshal(a)
	if err != nil {
		return "", fmt.Errorf("applied state: %w", err)
	}
	return string(b), nil
}

// ParseApplied decodes an Applied annotation.
func ParseApplied(s string) (Applied, error) {
	var a Applied
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		return a, fmt.Errorf("applied state: %w", err)
	}
	if a.Version != AppliedVersion {
		return a, fmt.Errorf("applied state: version %q, want %q", a.Version, AppliedVersion)
	}
	return a, nil
}
