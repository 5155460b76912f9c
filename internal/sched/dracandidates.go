package sched

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// Candidate nodes for a pod with ResourceClaims. The DynamicResources
// plugin runs the stock allocator on every node it filters (most of the
// stock scheduler's CPU per claim pod); PreFilter hands it only the few
// nodes that have, by the claims allocated on their devices, one device
// with the pod's share free (a whole free device for a whole request),
// best first by the placement policy, as the plugin path does for GPU pods.
// The allocator still decides on them; if none of them works out the pod
// is retried at once on every node (PostFilter, as for GPU pods).

// narrowable reports whether the candidates' reading of claims is exact for
// the pod's claims: each request asks for a share of one device naming both
// units and memory (gpuslice.io's shares); a pod with any other shape (whole
// devices, other drivers' capacities, constraints) is not narrowed.
func narrowable(claims []*resourceapi.ResourceClaim) bool {
	if len(claims) == 0 {
		return false
	}
	for _, c := range claims {
		if len(c.Spec.Devices.Constraints) > 0 {
			return false
		}
		for _, r := range c.Spec.Devices.Requests {
			ex := r.Exactly
			if ex == nil || ex.AllocationMode != resourceapi.DeviceAllocationModeExactCount || ex.Count != 1 || ex.Capacity == nil ||
				len(ex.Tolerations) > 0 || ex.AdminAccess != nil && *ex.AdminAccess {
				return false // (tainted devices and admin access: the books do not count them)
			}
			_, u := ex.Capacity.Requests[capUnits]
			_, m := ex.Capacity.Requests[capMemory]
			if !u || !m || len(ex.Capacity.Requests) != 2 {
				return false
			}
		}
	}
	return true
}

// draCandidateNodes bounds the candidates of a pod with ResourceClaims
// (below the plugin's candidateNodes): each one costs the DynamicResources
// plugin a run of the stock allocator, and the candidates are read from the
// same allocated state the allocator reads (in-flight allocations included),
// so the first of them fits unless a selector or taint says otherwise.
const draCandidateNodes = 4

// allocatedState is the claim tracker's allocated state (what the
// DynamicResources plugin's allocator starts from), read again when a
// concurrent change made the read inconsistent.
func (e *draEnv) allocatedState() (*structured.AllocatedState, error) {
	var err error
	for range 5 {
		var st *structured.AllocatedState
		if st, err = e.dra.ResourceClaims().GatherAllocatedState(); err == nil {
			return st, nil
		}
	}
	return nil, fmt.Errorf("allocated state: %w", err)
}

// consumed is what the allocated state holds of a device: its units and
// memory (all of them when allocated whole).
func consumed(st *structured.AllocatedState, d sharedDev) (units, mem int64) {
	if st.AllocatedDevices.Has(d.id) {
		return d.units, d.mem
	}
	c := st.AggregatedCapacity[d.id]
	if q := c[capUnits]; q != nil {
		units = q.Value()
	}
	if q := c[capMemory]; q != nil {
		mem = q.Value()
	}
	return units, mem
}

// draCandidates names up to k nodes among nis (the pod's node selector
// and affinity matching) with a device that has need free and whose GPU is
// not in busy (measured above the utilization threshold), best first by
// policy (binpack: the fullest such device; spread: the emptiest). all:
// the ResourceSlices as listed this cycle (nil: listed now).
func (e *draEnv) draCandidates(pod *corev1.Pod, nis []fwk.NodeInfo, all []*resourceapi.ResourceSlice, st *structured.AllocatedState, busy map[string]bool, need claimNeed, policy api.Placement, k int) ([]string, error) {
	if all == nil {
		var err error
		if all, err = e.dra.ResourceSlices().ListWithDeviceTaintRules(); err != nil {
			return nil, err
		}
	}
	names, _ := e.candidatesIn(pod, nis, all, st, busy, need, policy, k, false)
	return names, nil
}

// candidatesIn is draCandidates on the slices listed, and with slices the
// candidates' slices and those of no node, in all's order (what onlyOf
// returns for the names; none when no node is named).
func (e *draEnv) candidatesIn(pod *corev1.Pod, nis []fwk.NodeInfo, all []*resourceapi.ResourceSlice, st *structured.AllocatedState,
	busy map[string]bool, need claimNeed, policy api.Placement, k int, withSlices bool) (names []string, sl []*resourceapi.ResourceSlice) {
	ok := newNodeMatch(pod, nis)
	// Per slice, the best device that fits: its free fraction after the
	// pod, kept among the k best (a node's best: topFits). A slice the
	// state holds nothing of (its pool's devices all free) and without a
	// busy GPU fits as the first of its shape does; such slices of one
	// shape rank by node name, so only the first few of each are added.
	// A node's selector match is asked only of a slice with a fit (a full
	// cluster asks none).
	top := newTopFits(policy, k)
	t := &e.table
	t.mu.Lock()
	defer t.mu.Unlock()
	stamp, noNode := t.list(all, st, busy)
	if nn := t.nominatedFit(pod, ok, stamp, st, busy, need, policy); nn != "" {
		names = []string{nn}
		if withSlices {
			sl = t.slicesOf(all, stamp, names, noNode)
		}
		return names, sl
	}
	t.rank(top, ok, stamp, func(*sliceEntry) *structured.AllocatedState { return st }, busy, need)
	names = top.names()
	if withSlices && len(names) > 0 {
		sl = t.slicesOf(all, stamp, names, noNode)
	}
	return names, sl
}

// rank adds to top (t.mu held) the best fit of each node with a slice
// listed in the cycle of stamp that ok admits: device by device for the
// touched slices, each read with stateOf its entry; the untouched ones
// (every device free) by their shape's first slice.
func (t *devTable) rank(top *topFits, ok *nodeMatch, stamp uint64, stateOf func(*sliceEntry) *structured.AllocatedState,
	busy map[string]bool, need claimNeed) {
	for _, id := range t.touched {
		en := t.entries[id]
		if en.node == "" {
			continue
		}
		if best, found := bestFit(en.devs, stateOf(en), busy, need, top.policy); found && ok.admits(en.node) {
			top.add(best)
		}
	}
	for _, g := range t.shapes {
		left, found := freeFitOf(g.first.devs, need, top.policy)
		if !found {
			continue
		}
		t.untouched(g, stamp, func(en *sliceEntry) bool {
			if en.node == "" || !ok.admits(en.node) {
				return true
			}
			f := nodeFit{node: en.node, left: left}
			if len(top.top) == top.k && !f.better(top.top[top.k-1], top.policy) {
				return false // (nor any after it: the same fit, later names)
			}
			top.add(f)
			return true
		})
	}
}

// nominatedFit is the pod's nominated node when one of its slices listed
// in the cycle of stamp (t.mu held) has a device with need free whose GPU
// is not busy, and the pod's selector admits it; else "". A pod nominated
// by a preemption goes back to the node its victims freed, as
// kube-scheduler tries that node first (and the plugin path's PreFilter
// hands it back), without ranking every node again.
func (t *devTable) nominatedFit(pod *corev1.Pod, ok *nodeMatch, stamp uint64, st *structured.AllocatedState,
	busy map[string]bool, need claimNeed, policy api.Placement) string {
	nn := pod.Status.NominatedNodeName
	if nn == "" {
		return ""
	}
	for _, id := range t.byNode[nn] {
		if en := t.entries[id]; t.seen[id] == stamp && len(en.devs) > 0 {
			if _, found := bestFit(en.devs, st, busy, need, policy); found && ok.admits(nn) {
				return nn
			}
		}
	}
	return ""
}

// freeFitOf is the best fit's free fraction of devs (one slice's, in
// order) for need by policy with nothing allocated on them.
func freeFitOf(devs []sharedDev, need claimNeed, policy api.Placement) (left float64, found bool) {
	best, found := nodeFit{}, false
	for i := range devs {
		f, ok := fitOf(&devs[i], 0, 0, need)
		if f.node = ""; ok && (!found || f.better(best, policy)) {
			best, found = f, true
		}
	}
	return best.left, found
}

// bestFit is the best device of devs (one slice's, in order) by policy
// that has need free in st and whose GPU is not busy.
func bestFit(devs []sharedDev, st *structured.AllocatedState, busy map[string]bool, need claimNeed, policy api.Placement) (nodeFit, bool) {
	best, found := nodeFit{node: devs[0].node}, false
	for i := range devs {
		d := &devs[i] // (read in place: the table's entries are large)
		if len(busy) > 0 && busy[d.uuid] {
			continue
		}
		u, m := consumed(st, *d)
		if f, ok := fitOf(d, u, m, need); ok && (!found || f.better(best, policy)) {
			best, found = f, true
		}
	}
	return best, found
}

// nodeMatch tells whether the pod's node selector and required affinity
// admit a node of nis, by name, matching each node on its first ask: a
// cycle's candidates ask about the nodes with a fit, not every node. nil:
// the pod has neither (every node admitted).
type nodeMatch struct {
	aff   nodeaffinity.RequiredNodeAffinity
	nodes nodeLookup
	memo  map[string]bool
}

// nodeScans: the nodes looked up by a scan of the list before an index
// of them by name is made (nodeLookup).
const nodeScans = 8

// nodeLookup finds nodes of nis by name: by a scan for the first
// nodeScans lookups (a cycle that asks about a few nodes makes no index),
// by an index made then for the rest.
type nodeLookup struct {
	nis    []fwk.NodeInfo
	asked  int
	byName map[string]fwk.NodeInfo
}

// get is the named node of nis (nil: none).
func (l *nodeLookup) get(name string) fwk.NodeInfo {
	if l.byName == nil {
		if l.asked < nodeScans {
			l.asked++
			return nodeNamed(l.nis, name)
		}
		l.byName = make(map[string]fwk.NodeInfo, len(l.nis))
		for _, ni := range l.nis {
			if n := ni.Node(); n != nil {
				l.byName[n.Name] = ni
			}
		}
	}
	return l.byName[name]
}

// newNodeMatch is pod's nodeMatch among nis (nil: no selector, no
// required affinity).
func newNodeMatch(pod *corev1.Pod, nis []fwk.NodeInfo) *nodeMatch {
	a := pod.Spec.Affinity
	if len(pod.Spec.NodeSelector) == 0 && (a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil) {
		return nil
	}
	return &nodeMatch{aff: nodeaffinity.GetRequiredNodeAffinity(pod), nodes: nodeLookup{nis: nis}}
}

// admits reports whether the node named is one of nis that the pod's
// selector and affinity match.
func (m *nodeMatch) admits(name string) bool {
	if m == nil {
		return true
	}
	if v, ok := m.memo[name]; ok {
		return v
	}
	if m.memo == nil {
		m.memo = map[string]bool{}
	}
	var n *corev1.Node
	if ni := m.nodes.get(name); ni != nil {
		n = ni.Node()
	}
	v := false
	if n != nil {
		match, err := m.aff.Match(n)
		v = err == nil && match
	}
	m.memo[name] = v
	return v
}

// nodeFit is a node's best device for a pod: its free fraction after it.
type nodeFit struct {
	node string
	left float64
}

// better: f ranks before g by policy (binpack: less left; spread: more);
// ties, and first fit, by name.
func (f nodeFit) better(g nodeFit, policy api.Placement) bool {
	if f.left != g.left && policy != api.PlacementFirstFit {
		return (policy == api.PlacementSpread) == (f.left > g.left)
	}
	return f.node < g.node
}

// topNodes names the k best of fits by policy, best first (a partial
// selection: k is small, the nodes many).
func topNodes(fits []nodeFit, policy api.Placement, k int) []string {
	t := newTopFits(policy, k)
	for _, f := range fits {
		t.add(f)
	}
	return t.names()
}

// topFits keeps the k best fits added by policy, best first, one per node
// (its best).
type topFits struct {
	policy api.Placement
	k      int
	top    []nodeFit
}

func newTopFits(policy api.Placement, k int) *topFits {
	return &topFits{policy: policy, k: k, top: make([]nodeFit, 0, k+1)}
}

// add puts f among the k best. A fit not better than the last of a full
// list is not among them, nor better than its node's entry there (which is
// not after the last): left out without a lookup, as most fits are.
func (t *topFits) add(f nodeFit) {
	if t.k <= 0 || len(t.top) == t.k && !f.better(t.top[t.k-1], t.policy) {
		return
	}
	if j := slices.IndexFunc(t.top, func(g nodeFit) bool { return g.node == f.node }); j >= 0 {
		if !f.better(t.top[j], t.policy) {
			return // (a node of several slices: its best)
		}
		t.top = slices.Delete(t.top, j, j+1)
	}
	i := sort.Search(len(t.top), func(i int) bool { return f.better(t.top[i], t.policy) })
	if i >= t.k {
		return
	}
	t.top = slices.Insert(t.top, i, f)
	if len(t.top) > t.k {
		t.top = t.top[:t.k]
	}
}

// names are the nodes kept, best first.
func (t *topFits) names() []string {
	names := make([]string, len(t.top))
	for i, f := range t.top {
		names[i] = f.node
	}
	return names
}

// narrowDRA is PreFilter's result for a pod with ResourceClaims: the
// candidate nodes when its claims are narrowable and some node has room by
// the allocated state (nil: every node; also once the pod was widened). A
// pod asking for one share that no device has free is refused at once
// (PostFilter then preempts), without a run of the stock allocator on every
// node: the state is the allocator's own, and a device it counts free is
// one the allocator could give, so none free by it is none by the
// allocator. (With several requests the largest units and memory may come
// from different devices; such pods go on to the allocator.)
func (p *Plugin) narrowDRA(state fwk.CycleState, c *cycle, pod *corev1.Pod, claims []*resourceapi.ResourceClaim, missing int, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	sd := steered(state)
	if sd != nil && sd.cands != nil && sd.cands.err == nil && len(sd.cands.names) > 0 {
		// The allocator was shown these nodes' slices alone.
		c.draState, c.narrowed = sd.state, true
		c.draSlices = candSlices{names: sets.New(sd.cands.names...), slices: sd.cands.slices}
		return p.steeredUnheld(c, pod, claims, nodes, sd.cands.names) // nominated.go
	}
	if p.candidates == 0 || missing > 0 || !narrowable(claims) || p.wait.widened(pod) {
		return nil, nil
	}
	var names, heldBy []string // heldBy: the pods nominated where the share is free
	var err error
	if sd != nil && sd.cands != nil {
		names, err, c.draState = sd.cands.names, sd.cands.err, sd.state
	} else {
		st, busy, serr := p.draStateOf(sd)
		if serr != nil {
			return nil, nil
		}
		c.draState = st
		k := min(p.candidates, draCandidateNodes)
		names, err = p.preempt.dra.draCandidates(pod, nodes, nil, st, busy, c.draNeed, p.alloc.Policy(c.req), k+maxHeldChecks)
		if err == nil {
			names, heldBy, err = p.draUnheld(c, pod, nodes, names, k) // nominated.go
		}
	}
	switch {
	case err != nil:
		return nil, nil
	case len(names) == 0 && len(claims) == 1 && len(claims[0].Spec.Devices.Requests) == 1:
		return nil, fwk.NewStatus(fwk.Unschedulable, heldRefusal(pod.Namespace, heldBy))
	case len(names) == 0:
		return nil, nil
	}
	c.narrowed = true
	return &fwk.PreFilterResult{NodeNames: sets.New(names...)}, nil
}

var errNoShare = errors.New("gpuslice: no device of a matching node has the claim's share free (units and memory, allocations in flight counted)")

// narrowingFor is what the view needs to compute the candidate nodes of
// pod (a pod asking for no gpuslice resources) from the state the
// DynamicResources plugin gathers, or nil when narrowDRA would not narrow it.
func (p *Plugin) narrowingFor(pod *corev1.Pod, nodes []fwk.NodeInfo) *narrowing {
	if p.preempt == nil || p.preempt.dra == nil || p.candidates == 0 || !hasClaims(pod) || p.wait.widened(pod) {
		return nil
	}
	claims, missing := p.preempt.dra.pendingClaims(pod)
	if missing > 0 || !narrowable(claims) {
		return nil
	}
	return &narrowing{env: p.preempt.dra, pod: pod, nodes: nodes, need: needOf(claims), k: min(p.candidates, draCandidateNodes),
		refused: len(claims) == 1 && len(claims[0].Spec.Devices.Requests) == 1}
}

// hidesBusy reports whether the device view may leave busy GPUs out for
// pod: only when each of its pending claims is a plain share (narrowable:
// no admin access, tolerations or constraints) with no selectors. A claim
// naming its device (a CEL selector) or with admin access would be refused
// a device it may have; for those the view only reorders. A nil plugin
// (no GPUSlice in the profile) or no DRA: busy GPUs are left out, as the
// books measure them.
func (p *Plugin) hidesBusy(pod *corev1.Pod) bool {
	if p == nil || p.preempt == nil || p.preempt.dra == nil || !hasClaims(pod) {
		return true
	}
	claims, _ := p.preempt.dra.pendingClaims(pod)
	for _, c := range claims {
		if !narrowable([]*resourceapi.ResourceClaim{c}) {
			return false
		}
		for _, r := range c.Spec.Devices.Requests {
			if len(r.Exactly.Selectors) > 0 {
				return false
			}
		}
	}
	return true
}

// steered is what DRAName's PreFilter left for this cycle (nil: nothing).
func steered(state fwk.CycleState) *steerData {
	if d, err := state.Read(steerKey); err == nil {
		if sd, ok := d.(*steerData); ok && sd.state != nil {
			return sd
		}
	}
	return nil
}

// draStateOf is the allocated state DRAName's PreFilter gathered for this
// pod (and the busy GPUs it hid), or else the claim tracker's now.
func (p *Plugin) draStateOf(sd *steerData) (*structured.AllocatedState, map[string]bool, error) {
	var busy map[string]bool
	if sd != nil {
		if !sd.partial {
			return sd.state, sd.busy, nil
		}
		busy = sd.busy // (a state of one node's pools: gathered whole)
	}
	st, err := p.preempt.dra.allocatedState()
	return st, busy, err
}
