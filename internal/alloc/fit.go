package alloc

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// MaxScore is the best node score.
const MaxScore = 100

// candidate is one GPU's free capacity during a fit, updated as the pod's
// containers take shares of it.
type candidate struct {
	gpu       *GPU
	freeUnits int64
	freeMem   int64
	freeSlots int  // containers it may still take (api.MaxContainersPerGPU)
	empty     bool // nothing held: may be taken whole
	taken     bool // taken whole by this pod
	frac      float64
}

// skipped counts why GPUs were not candidates, for the unschedulable reason.
type skipped struct{ unhealthy, busy, foreign, exclusive, full, mode int }

func (s skipped) String() string {
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{s.unhealthy, "unhealthy"}, {s.busy, "over the utilization threshold"}, {s.foreign, "busy with unscheduled processes"}, {s.exclusive, "held whole"}, {s.full, fmt.Sprintf("holding %d containers", api.MaxContainersPerGPU)}, {s.mode, "in another sharing mode"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// stackGPUs is how many GPUs per node fit in the allocation-free scratch
// space of a fit; bigger nodes still work, with allocations.
const stackGPUs = 16

// Fit chooses GPUs on node for every container of req, or says why none fit.
// The returned assignment is not booked: Reserve it.
func (b *Books) Fit(node string, req *api.PodRequest, now time.Time) (*api.Assignment, error) {
	return b.FitWith(node, req, now, nil)
}

// FitWith is Fit on the node as the overlay o leaves it (nil: as booked).
func (b *Books) FitWith(node string, req *api.PodRequest, now time.Time, o *Overlay) (*api.Assignment, error) {
	a := &api.Assignment{Version: api.AssignmentVersion, Node: node}
	if err := b.fit(node, req, now, o, a, true); err != nil {
		return nil, err
	}
	return a, nil
}

// Check tells whether req fits on node, exactly as Fit would, without
// building the assignment (the scheduler's Filter hot path: no allocation).
func (b *Books) Check(node string, req *api.PodRequest, now time.Time) error {
	return b.fit(node, req, now, nil, nil, true)
}

// errNoFit is fit's answer when it is not asked why (ranking many nodes:
// formatting every full node's reason was much of the cost).
var errNoFit = errors.New("does not fit")

// fit places req on node as the overlay o (nil: none) leaves it, filling
// out when it is not nil. Without why, every refusal is errNoFit.
func (b *Books) fit(node string, req *api.PodRequest, now time.Time, o *Overlay, out *api.Assignment, why bool) error {
	ns := b.nodes[node]
	if !why && (ns == nil || ns.table == nil || ns.table.State != v1alpha2.NodeWorking || !b.live(ns, now)) {
		return errNoFit
	}
	if ns == nil || ns.table == nil {
		return fmt.Errorf("node %s has no GPUNode entry", node)
	}
	t := ns.table
	if t.State != v1alpha2.NodeWorking {
		return fmt.Errorf("node %s is %s", node, t.State)
	}
	if err := b.leaseErr(ns, now); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	var cbuf [stackGPUs]candidate
	var cands []candidate
	var sk skipped
	if o.Empty() {
		cands, sk = b.candidates(ns, &ns.used, nil, req.Sharing, cbuf[:0])
	} else {
		cands, sk = b.overlaid(node, ns, o, req.Sharing, cbuf[:0])
	}
	policy := b.policy(req)
	for _, c := range req.Containers {
		var pbuf [stackGPUs]int
		chosen, have := pick(cands, c, policy, pbuf[:0])
		if chosen == nil {
			if !why {
				return errNoFit
			}
			return fmt.Errorf("node %s: container %q: %w%s", node, c.Name, pickErr(c, have), sk)
		}
		if out != nil {
			out.Containers = append(out.Containers, api.ContainerAssignment{Name: c.Name, GPUs: shares(cands, chosen, c)})
		}
	}
	return nil
}

func (b *Books) policy(req *api.PodRequest) api.Placement {
	if req.Placement != "" {
		return req.Placement
	}
	return b.cfg.DefaultPlacement
}

// candidates lists the node's GPUs a pod may get a share of, with what is
// free on each given the usage used. GPUs in freed (preemption's dry run
// took pods off them) are not skipped as over the utilization threshold:
// part of what was measured is those pods' work.
func (b *Books) candidates(ns *nodeState, used *usageSet, freed []int32, sharing api.SharingMode, out []candidate) ([]candidate, skipped) {
	var sk skipped
	for i := range ns.table.GPUs {
		g := &ns.table.GPUs[i]
		var u Usage
		if p := used.get(g.Index); p != nil {
			u = *p
		}
		switch {
		case !g.Healthy:
			sk.unhealthy++
		case b.cfg.Busy(g.UtilizationPercent) && !slices.Contains(freed, g.Index):
			sk.busy++
		case g.UnscheduledProcesses > 0 && !b.cfg.AllowUnscheduledProcesses:
			sk.foreign++
		case u.ExclusivePods > 0:
			sk.exclusive++
		case u.Containers >= api.MaxContainersPerGPU:
			sk.full++
		case !g.Mode.Accepts(sharing):
			sk.mode++
		default:
			k := candidate{gpu: g, freeUnits: g.UnitsTotal - u.Units, freeMem: g.MemoryBytes - u.MemoryBytes, empty: u.Pods == 0,
				freeSlots: api.MaxContainersPerGPU - u.Containers}
			if g.Mode == api.SharingMPS && g.UnitsFree < k.freeUnits {
				k.freeUnits = g.UnitsFree // bounded by the MPS client slots the node measured
			}
			k.frac = k.freeFraction()
			out = append(out, k)
		}
	}
	return out, sk
}

// pick chooses c.Count distinct GPUs (indices into cands) in policy order
// and charges them, appending to out; when fewer fit, it returns nil and
// how many did (pickErr says so).
func pick(cands []candidate, c api.ContainerRequest, policy api.Placement, out []int) ([]int, int) {
	for i := range cands {
		k := &cands[i]
		if !k.taken && k.freeSlots > 0 && (c.Whole && k.empty || !c.Whole && k.freeUnits >= c.Units && k.freeMem >= c.MemoryBytes) {
			out = append(out, i)
		}
	}
	if len(out) < c.Count {
		return nil, len(out)
	}
	order(cands, out, policy)
	out = out[:c.Count]
	for _, i := range out {
		k := &cands[i]
		if c.Whole {
			k.freeUnits, k.freeMem, k.taken = 0, 0, true
		} else {
			k.freeUnits -= c.Units
			k.freeMem -= c.MemoryBytes
		}
		k.empty = false
		k.freeSlots--
		k.frac = k.freeFraction()
	}
	return out, len(out)
}

// pickErr says why pick found only have of the GPUs c needs.
func pickErr(c api.ContainerRequest, have int) error {
	if c.Whole {
		return fmt.Errorf("needs %d whole GPUs, %d free", c.Count, have)
	}
	return fmt.Errorf("needs %d GPUs with %d units and %d bytes free, %d have", c.Count, c.Units, c.MemoryBytes, have)
}

// shares builds a container's GPU shares from the chosen candidates.
func shares(cands []candidate, chosen []int, c api.ContainerRequest) []api.GPUAssignment {
	out := make([]api.GPUAssignment, 0, len(chosen))
	for _, i := range chosen {
		g := cands[i].gpu
		ga := api.GPUAssignment{Index: g.Index, UUID: g.UUID, Units: c.Units, MemoryBytes: c.MemoryBytes}
		if c.Whole {
			ga.Units, ga.MemoryBytes, ga.Exclusive = g.UnitsTotal, g.MemoryBytes, true
		}
		out = append(out, ga)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// freeFraction is a GPU's free share in [0, 2]: units plus memory.
func (k *candidate) freeFraction() float64 {
	return float64(k.freeUnits)/float64(k.gpu.UnitsTotal) + float64(k.freeMem)/float64(k.gpu.MemoryBytes)
}

// order sorts idx (indices into cands) by policy: insertion sort, as nodes
// have few GPUs and the hot path must not allocate.
func order(cands []candidate, idx []int, policy api.Placement) {
	less := func(a, b *candidate) bool {
		return DeviceBefore(policy, a.frac, b.frac, int(a.gpu.Index), int(b.gpu.Index))
	}
	for i := 1; i < len(idx); i++ {
		for j := i; j > 0 && less(&cands[idx[j]], &cands[idx[j-1]]); j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
}

// DeviceBefore is the order in which a node's devices are offered to a pod
// by policy: binpack the fullest first, spread the emptiest, first-fit (and
// ties) by position (a GPU's index). freeA and freeB are the devices' free
// shares before the pod, units plus memory as fractions (0 to 2). GPU pods
// (order) and pods with ResourceClaims (internal/sched's device view, which
// offers the stock allocator a node's devices in this order) share it.
func DeviceBefore(policy api.Placement, freeA, freeB float64, posA, posB int) bool {
	if policy != api.PlacementFirstFit && freeA != freeB {
		return (policy == api.PlacementBinpack) == (freeA < freeB)
	}
	return posA < posB
}

// Score rates placing req on node for its policy in [0, MaxScore]: binpack
// favours nodes whose healthy GPUs are fuller afterwards (units and memory,
// as fractions of each GPU), spread emptier ones, first-fit rates all nodes
// alike. The request is spread over the node's average GPU, so the score
// needs no assignment (no allocation).
func (b *Books) Score(node string, req *api.PodRequest) int64 {
	policy := b.policy(req)
	ns := b.nodes[node]
	if policy == api.PlacementFirstFit || ns == nil || ns.table == nil {
		return 0
	}
	var used, units, mem float64
	var n int
	for i := range ns.table.GPUs {
		g := &ns.table.GPUs[i]
		if !g.Healthy {
			continue
		}
		u := ns.usage(g.Index)
		used += float64(u.Units)/float64(g.UnitsTotal) + float64(u.MemoryBytes)/float64(g.MemoryBytes)
		units += float64(g.UnitsTotal)
		mem += float64(g.MemoryBytes)
		n++
	}
	if n == 0 {
		return 0
	}
	avgUnits, avgMem := units/float64(n), mem/float64(n)
	var add float64
	for _, c := range req.Containers {
		if c.Whole {
			add += 2 * float64(c.Count)
		} else {
			add += float64(c.Count) * (float64(c.Units)/avgUnits + float64(c.MemoryBytes)/avgMem)
		}
	}
	return PolicyScore(policy, used, add, n)
}

// PolicyScore rates a node of n devices in [0, MaxScore] by policy: used
// is what its devices hold (per device, the fractions of its units and of
// its memory held: 0 to 2n in all) and add what the pod adds (2 a whole
// device). Binpack favours nodes fuller afterwards, spread emptier ones,
// first-fit rates all alike. GPU pods (Books.Score) and pods with
// ResourceClaims (internal/sched, from the claims' consumed capacity) are
// rated by it.
func PolicyScore(policy api.Placement, used, add float64, n int) int64 {
	if policy == api.PlacementFirstFit || n == 0 {
		return 0
	}
	s := int64(MaxScore * (used + add) / float64(2*n))
	s = min(max(s, 0), MaxScore)
	if policy == api.PlacementSpread {
		return MaxScore - s
	}
	return s
}

// Policy is the placement policy for req: its own, or the cluster's.
func (b *Books) Policy(req *api.PodRequest) api.Placement { return b.policy(req) }

// FreeWhole returns the node's GPUs a pod could take whole now, in index
// order: those Fit would consider (healthy, not over the utilization
// threshold, no unscheduled processes unless allowed) that nobody holds any
// share of. None when the node is not Working or its heartbeat is stale.
func (b *Books) FreeWhole(node string, now time.Time) []GPU {
	ns := b.nodes[node]
	if ns == nil || ns.table == nil || ns.table.State != v1alpha2.NodeWorking || b.leaseErr(ns, now) != nil {
		return nil
	}
	var cbuf [stackGPUs]candidate
	cands, _ := b.candidates(ns, &ns.used, nil, "", cbuf[:0])
	var out []GPU
	for _, k := range cands {
		if k.empty {
			out = append(out, *k.gpu)
		}
	}
	return out
}

// live is leaseErr == nil without building the error.
func (b *Books) live(ns *nodeState, now time.Time) bool {
	if ns.lease == nil {
		return false
	}
	limit := b.cfg.HeartbeatTimeout
	if d := ns.lease.Duration; d > 0 && d < limit {
		limit = d
	}
	return now.Sub(ns.lease.Renewed) <= limit
}

// leaseErr says why the node's agent counts as gone: no Lease, or one not
// renewed within its duration or the configured HeartbeatTimeout, whichever
// is shorter.
func (b *Books) leaseErr(ns *nodeState, now time.Time) error {
	if ns.lease == nil {
		return errors.New("no gpuslice Lease (its node agent never reported alive)")
	}
	limit := b.cfg.HeartbeatTimeout
	if d := ns.lease.Duration; d > 0 && d < limit {
		limit = d
	}
	if age := now.Sub(ns.lease.Renewed); age > limit {
		return fmt.Errorf("gpuslice Lease expired (renewed %s ago, holds %s)", age.Round(time.Second), limit)
	}
	return nil
}
