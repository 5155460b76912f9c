// Package resize is the cluster side of hot GPU add/remove: a pod states in
// the annotation AnnotationWantGPUs how many whole GPUs its container wants;
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
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// Annotations (to move to pkg/api; see docs/node-agent.md).
const (
	// AnnotationWantGPUs: whole GPUs wanted, "N" (the pod's only
	// whole-GPU container) or "name=N,other=M".
	AnnotationWantGPUs = api.Group + "/gpus"
	// AnnotationApplied: the node agent's report of the devices it applied
	// (JSON Applied).
	AnnotationApplied = api.Group + "/applied"
)

// ErrInvalidWant wraps a malformed or unusable AnnotationWantGPUs.
var ErrInvalidWant = errors.New("invalid gpuslice GPU count")

// ParseWant reads AnnotationWantGPUs against an assignment: a bare count
// needs exactly one whole-GPU container; every named container must hold
// whole GPUs only; counts are 1..api.MaxGPUsPerContainer.
func ParseWant(s string, a *api.Assignment) (map[string]int, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s=%q: "+format, append([]any{ErrInvalidWant, AnnotationWantGPUs, s}, args...)...)
	}
	out := map[string]int{}
	whole := wholeContainers(a)
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		name, num, named := strings.Cut(part, "=")
		if !named {
			num, name = name, ""
			if len(whole) != 1 {
				return nil, bad("a bare count needs exactly one whole-GPU container, the pod has %d", len(whole))
			}
			name = whole[0]
		}
		n, err := strconv.Atoi(strings.TrimSpace(num))
		if err != nil || n < 1 || n > api.MaxGPUsPerContainer {
			return nil, bad("count %q: want 1..%d", num, api.MaxGPUsPerContainer)
		}
		name = strings.TrimSpace(name)
		if !slices.Contains(whole, name) {
			return nil, bad("container %q has no whole (exclusive) GPUs to resize", name)
		}
		if _, dup := out[name]; dup {
			return nil, bad("container %q named twice", name)
		}
		out[name] = n
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
func Plan(a *api.Assignment, want map[string]int, free []api.GPU) (out *api.Assignment, short []Shortfall, changed bool) {
	out = &api.Assignment{Version: a.Version, Node: a.Node}
	mine := a.Totals()
	pool := slices.DeleteFunc(slices.Clone(free), func(g api.GPU) bool { _, held := mine[g.Index]; return held })
	slices.SortFunc(pool, func(x, y api.GPU) int { return cmp.Compare(x.Index, y.Index) })
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
			nc.GPUs = append(nc.GPUs, api.GPUAssignment{Index: g.Index, UUID: g.UUID, Units: g.UnitsTotal, MemoryBytes: g.MemoryBytes, Exclusive: true})
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

// FreeGPUs is the node's healthy GPUs that no assignment in others holds.
func FreeGPUs(node *api.GPUNode, others []*api.Assignment) []api.GPU {
	used := map[int32]bool{}
	for _, a := range others {
		if a.Node != node.Name {
			continue
		}
		for idx := range a.Totals() {
			used[idx] = true
		}
	}
	var out []api.GPU
	for _, g := range node.Status.GPUs {
		if g.Health == api.GPUHealthy && !used[g.Index] {
			out = append(out, g)
		}
	}
	return out
}
