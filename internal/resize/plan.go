// Package resize is the cluster side of hot GPU add/remove: a pod states in
// the annotation api.AnnotationGPUs how many whole GPUs its container wants;
// when that differs from its assignment, the controller grants free GPUs of
// the pod's node (all it can, with an Event saying how many are still
// missing) or releases some, and rewrites the assignment. The node agent then
// changes the running container's devices. Plan is the pure decision.
package resize

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// ErrInvalidWant wraps an api.AnnotationGPUs value that is malformed
// (wrapping api.ErrInvalidGPUs too) or that does not fit the pod.
var ErrInvalidWant = errors.New("unusable gpuslice GPU count")

// ParseWant reads api.AnnotationGPUs (api.ParseGPUs) against the pod's
// assignment: a bare count needs exactly one whole-GPU container, and every
// named container must hold whole (exclusive) GPUs only.
func ParseWant(s string, a *api.Assignment) (map[string]int, error) {
	counts, err := api.ParseGPUs(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidWant, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s=%q: "+format, append([]any{ErrInvalidWant, api.AnnotationGPUs, s}, args...)...)
	}
	whole := wholeContainers(a)
	out := make(map[string]int, len(counts))
	for _, c := range counts {
		name := c.Container
		if name == "" {
			if len(whole) != 1 {
				return nil, bad("a bare count needs exactly one whole-GPU container, the pod has %d", len(whole))
			}
			name = whole[0]
		}
		if !slices.Contains(whole, name) {
			return nil, bad("container %q has no whole (exclusive) GPUs to resize", name)
		}
		out[name] = c.Count
	}
	return out, nil
}

// wholeContainers names the containers whose GPUs are all exclusive.
func wholeContainers(a *api.Assignment) []string {
	var out []string
	for _, c := range a.Containers {
		whole := len(c.GPUs) > 0
		for _, g := range c.GPUs {
			whole = whole && g.Exclusive
		}
		if whole {
			out = append(out, c.Name)
		}
	}
	return out
}

// Shortfall is a container granted fewer GPUs than it wants.
type Shortfall struct {
	Container string
	Want, Got int
}

func (s Shortfall) String() string {
	return fmt.Sprintf("container %q wants %d GPUs, has %d: %d still missing", s.Container, s.Want, s.Got, s.Want-s.Got)
}

// Plan returns the assignment that gives each container of want its count
// of whole GPUs: extra GPUs come from free (the node's healthy GPUs no other
// pod holds any share of), lowest index first; released ones are the highest
// indices. changed is false when a already matches. Containers that cannot
// get all they want get all there is, reported as shortfalls.
func Plan(a *api.Assignment, want map[string]int, free []v1alpha2.GPU) (out *api.Assignment, short []Shortfall, changed bool) {
	out = &api.Assignment{Version: a.Version, Node: a.Node}
	mine := a.Totals()
	pool := slices.DeleteFunc(slices.Clone(free), func(g v1alpha2.GPU) bool { _, held := mine[g.Index]; return held })
	slices.SortFunc(pool, func(x, y v1alpha2.GPU) int { return cmp.Compare(x.Index, y.Index) })
	for _, c := range a.Containers {
		nc := api.ContainerAssignment{Name: c.Name, GPUs: slices.Clone(c.GPUs)}
		n, ok := want[c.Name]
		if !ok || n == len(c.GPUs) {
			out.Containers = append(out.Containers, nc)
			continue
		}
		slices.SortFunc(nc.GPUs, func(x, y api.GPUAssignment) int { return cmp.Compare(x.Index, y.Index) })
		orig := slices.Clone(nc.GPUs)
		if n < len(nc.GPUs) {
			nc.GPUs = nc.GPUs[:n]
		}
		for len(nc.GPUs) < n && len(pool) > 0 {
			g := pool[0]
			pool = pool[1:]
			nc.GPUs = append(nc.GPUs, api.GPUAssignment{Index: g.Index, UUID: g.UUID, Units: g.UnitsTotal, MemoryBytes: g.Memory.Value(), Exclusive: true})
		}
		if len(nc.GPUs) < n {
			short = append(short, Shortfall{Container: c.Name, Want: n, Got: len(nc.GPUs)})
		}
		changed = changed || !sameGPUs(nc.GPUs, orig)
		out.Containers = append(out.Containers, nc)
	}
	return out, short, changed
}

func sameGPUs(a, b []api.GPUAssignment) bool {
	return slices.EqualFunc(a, b, func(x, y api.GPUAssignment) bool { return x.Index == y.Index })
}
