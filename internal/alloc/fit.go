package alloc

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// MaxScore is the best node score.
const MaxScore = 100

// candidate is one GPU's free capacity during a fit, updated as the pod's
// containers take shares of it.
type candidate struct {
	gpu       *GPU
	freeUnits int64
	freeMem   int64
	empty     bool // nothing held: may be taken whole
	taken     bool // taken whole by this pod
}

// skipped counts why GPUs were not candidates, for the unschedulable reason.
type skipped struct{ unhealthy, busy, foreign, exclusive int }

func (s skipped) String() string {
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{s.unhealthy, "unhealthy"}, {s.busy, "over the utilization threshold"}, {s.foreign, "busy with unscheduled processes"}, {s.exclusive, "held whole"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// Fit chooses GPUs on node for every container of req, or says why none fit.
// The returned assignment is not booked: Reserve it.
func (b *Books) Fit(node string, req *api.PodRequest, now time.Time) (*api.Assignment, error) {
	ns := b.nodes[node]
	if ns == nil || ns.table == nil {
		return nil, fmt.Errorf("node %s has no GPUNode entry", node)
	}
	t := ns.table
	if t.State != api.NodeWorking {
		return nil, fmt.Errorf("node %s is %s", node, t.State)
	}
	if age := now.Sub(t.Heartbeat); age > b.cfg.HeartbeatTimeout {
		return nil, fmt.Errorf("node %s heartbeat is stale (%s old, timeout %s)", node, age.Round(time.Second), b.cfg.HeartbeatTimeout)
	}
	cands, sk := b.candidates(ns)
	policy := b.policy(req)
	a := &api.Assignment{Version: api.AssignmentVersion, Node: node}
	for _, c := range req.Containers {
		gpus, err := pick(cands, c, policy)
		if err != nil {
			return nil, fmt.Errorf("node %s: container %q: %w%s", node, c.Name, err, sk)
		}
		a.Containers = append(a.Containers, api.ContainerAssignment{Name: c.Name, GPUs: gpus})
	}
	return a, nil
}

func (b *Books) policy(req *api.PodRequest) api.Placement {
	if req.Placement != "" {
		return req.Placement
	}
	return b.cfg.DefaultPlacement
}

func (b *Books) candidates(ns *nodeState) ([]*candidate, skipped) {
	var sk skipped
	out := make([]*candidate, 0, len(ns.table.GPUs))
	for i := range ns.table.GPUs {
		g := &ns.table.GPUs[i]
		u := ns.usage(g.Index)
		switch {
		case !g.Healthy:
			sk.unhealthy++
		case g.UtilizationPercent > b.cfg.UtilizationThreshold:
			sk.busy++
		case g.UnscheduledProcesses > 0 && !b.cfg.AllowUnscheduledProcesses:
			sk.foreign++
		case u.ExclusivePods > 0:
			sk.exclusive++
		default:
			out = append(out, &candidate{gpu: g, freeUnits: g.UnitsTotal - u.Units, freeMem: g.MemoryBytes - u.MemoryBytes, empty: u.Pods == 0})
		}
	}
	return out, sk
}

// pick takes c.Count distinct GPUs from cands in policy order and charges them.
func pick(cands []*candidate, c api.ContainerRequest, policy api.Placement) ([]api.GPUAssignment, error) {
	fits := make([]*candidate, 0, len(cands))
	for _, k := range cands {
		if k.taken {
			continue
		}
		if c.Whole && k.empty || !c.Whole && k.freeUnits >= c.Units && k.freeMem >= c.MemoryBytes {
			fits = append(fits, k)
		}
	}
	if len(fits) < c.Count {
		if c.Whole {
			return nil, fmt.Errorf("needs %d whole GPUs, %d free", c.Count, len(fits))
		}
		return nil, fmt.Errorf("needs %d GPUs with %d units and %d bytes free, %d have", c.Count, c.Units, c.MemoryBytes, len(fits))
	}
	order(fits, policy)
	out := make([]api.GPUAssignment, 0, c.Count)
	for _, k := range fits[:c.Count] {
		ga := api.GPUAssignment{Index: k.gpu.Index, UUID: k.gpu.UUID, Units: c.Units, MemoryBytes: c.MemoryBytes}
		if c.Whole {
			ga.Units, ga.MemoryBytes, ga.Exclusive = k.gpu.UnitsTotal, k.gpu.MemoryBytes, true
			k.taken = true
		}
		k.freeUnits -= ga.Units
		k.freeMem -= ga.MemoryBytes
		k.empty = false
		out = append(out, ga)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// freeFraction is a GPU's free share in [0, 2]: units plus memory.
func (k *candidate) freeFraction() float64 {
	return float64(k.freeUnits)/float64(k.gpu.UnitsTotal) + float64(k.freeMem)/float64(k.gpu.MemoryBytes)
}

func order(fits []*candidate, policy api.Placement) {
	sort.SliceStable(fits, func(i, j int) bool {
		a, b := fits[i], fits[j]
		if policy != api.PlacementFirstFit {
			fa, fb := a.freeFraction(), b.freeFraction()
			if fa != fb {
				return (policy == api.PlacementBinpack) == (fa < fb)
			}
		}
		return a.gpu.Index < b.gpu.Index
	})
}

// Score rates placing a on its node for policy in [0, MaxScore]: binpack
// favours nodes that are fuller afterwards, spread emptier ones, first-fit
// rates all nodes alike. Only healthy GPUs count.
func (b *Books) Score(a *api.Assignment, req *api.PodRequest) int64 {
	policy := b.policy(req)
	ns := b.nodes[a.Node]
	if policy == api.PlacementFirstFit || ns == nil || ns.table == nil {
		return 0
	}
	add := a.Totals()
	var used, total float64
	for i := range ns.table.GPUs {
		g := &ns.table.GPUs[i]
		if !g.Healthy {
			continue
		}
		u := ns.usage(g.Index)
		t := add[g.Index]
		used += float64(u.Units+t.Units)/float64(g.UnitsTotal) + float64(u.MemoryBytes+t.MemoryBytes)/float64(g.MemoryBytes)
		total += 2
	}
	if total == 0 {
		return 0
	}
	s := int64(MaxScore * used / total)
	s = min(max(s, 0), MaxScore)
	if policy == api.PlacementSpread {
		return MaxScore - s
	}
	return s
}
