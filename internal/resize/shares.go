package resize

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// ErrInvalidShareWant wraps an api.AnnotationUnits/api.AnnotationMemory
// value that is malformed (wrapping api.ErrInvalidShare too) or does not fit
// the pod.
var ErrInvalidShareWant = errors.New("unusable gpuslice share change")

// ShareWant is what a share container asks of each of its GPUs (0: keep).
type ShareWant struct{ Units, MemoryBytes int64 }

// ParseShareWant reads api.AnnotationUnits and api.AnnotationMemory ("" =
// absent) against the pod's assignment: a bare value needs exactly one share
// container, and every named container must hold shares (no whole GPUs).
func ParseShareWant(units, memory string, a *api.Assignment) (map[string]ShareWant, error) {
	shares := shareContainers(a)
	out := map[string]ShareWant{}
	add := func(ann, raw string, parse func(string) ([]api.ShareValue, error), set func(*ShareWant, int64)) error {
		if raw == "" {
			return nil
		}
		vals, err := parse(raw)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidShareWant, err)
		}
		for _, v := range vals {
			name := v.Container
			if name == "" {
				if len(shares) != 1 {
					return fmt.Errorf("%w: %s=%q: a bare value needs exactly one share container, the pod has %d", ErrInvalidShareWant, ann, raw, len(shares))
				}
				name = shares[0]
			}
			if !slices.Contains(shares, name) {
				return fmt.Errorf("%w: %s=%q: container %q holds no GPU share", ErrInvalidShareWant, ann, raw, name)
			}
			w := out[name]
			set(&w, v.Value)
			out[name] = w
		}
		return nil
	}
	if err := add(api.AnnotationUnits, units, api.ParseUnitsWant, func(w *ShareWant, v int64) { w.Units = v }); err != nil {
		return nil, err
	}
	if err := add(api.AnnotationMemory, memory, api.ParseMemoryWant, func(w *ShareWant, v int64) { w.MemoryBytes = v }); err != nil {
		return nil, err
	}
	return out, nil
}

// shareContainers names the containers whose GPUs are all shares.
func shareContainers(a *api.Assignment) []string {
	var out []string
	for _, c := range a.Containers {
		ok := len(c.GPUs) > 0
		for _, g := range c.GPUs {
			ok = ok && !g.Exclusive
		}
		if ok {
			out = append(out, c.Name)
		}
	}
	return out
}

// PlanShares returns a with each wanting container's units and memory on
// every one of its GPUs set to what it asks; changed is false when a
// already matches. Whether the GPUs can fit it is the books' decision.
func PlanShares(a *api.Assignment, want map[string]ShareWant) (out *api.Assignment, changed bool) {
	out = &api.Assignment{Version: a.Version, Node: a.Node}
	for _, c := range a.Containers {
		nc := api.ContainerAssignment{Name: c.Name, GPUs: slices.Clone(c.GPUs)}
		if w, ok := want[c.Name]; ok {
			for i := range nc.GPUs {
				g := &nc.GPUs[i]
				if w.Units > 0 && g.Units != w.Units {
					g.Units, changed = w.Units, true
				}
				if w.MemoryBytes > 0 && g.MemoryBytes != w.MemoryBytes {
					g.MemoryBytes, changed = w.MemoryBytes, true
				}
			}
		}
		out.Containers = append(out.Containers, nc)
	}
	return out, changed
}
