package sched

import (
	"fmt"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

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
			if ex == nil || ex.AllocationMode != resourceapi.DeviceAllocationModeExactCount || ex.Count != 1 || ex.Capacity == nil {
				return false
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

// sharedDev is one device of gpuslice.io's shape (consumable units and
// memory) as its ResourceSlice publishes it.
type sharedDev struct {
	id          structured.DeviceID
	units, mem  int64
	unavailable bool // tainted
}

// devTable keeps each ResourceSlice's shared devices, read once per slice
// object (the informer replaces the object when the slice changes), so a
// cycle does not re-read every device's capacities.
type devTable struct {
	mu      sync.Mutex
	bySlice map[*resourceapi.ResourceSlice][]sharedDev
}

// devices returns the shared devices of each slice of all, in order.
func (t *devTable) devices(all []*resourceapi.ResourceSlice) [][]sharedDev {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.bySlice == nil || len(t.bySlice) > 2*len(all)+16 { // drop replaced slices
		t.bySlice = make(map[*resourceapi.ResourceSlice][]sharedDev, len(all))
	}
	out := make([][]sharedDev, len(all))
	for i, s := range all {
		devs, ok := t.bySlice[s]
		if !ok {
			for _, d := range s.Spec.Devices {
				u, m := deviceCap(d, capUnits), deviceCap(d, capMemory)
				if u > 0 && m > 0 {
					devs = append(devs, sharedDev{id: structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name), units: u, mem: m, unavailable: len(d.Taints) > 0})
				}
			}
			t.bySlice[s] = devs
		}
		out[i] = devs
	}
	return out
}

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
// and affinity matching) with a device that has need free, best first by
// policy (binpack: the fullest such device; spread: the emptiest).
func (e *draEnv) draCandidates(pod *corev1.Pod, nis []fwk.NodeInfo, st *structured.AllocatedState, need claimNeed, policy api.Placement, k int) ([]string, error) {
	aff := nodeaffinity.GetRequiredNodeAffinity(pod)
	ok := make(map[string]bool, len(nis))
	for _, ni := range nis {
		if m, err := aff.Match(ni.Node()); err == nil && m {
			ok[ni.Node().Name] = true
		}
	}
	all, err := e.dra.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, err
	}
	// Per node, the best device that fits: its free fraction after the pod.
	best := map[string]float64{}
	for i, devs := range e.table.devices(all) {
		node := ptr.Deref(all[i].Spec.NodeName, "")
		if !ok[node] {
			continue
		}
		for _, d := range devs {
			u, m := consumed(st, d)
			if d.unavailable || d.units-u < need.units || d.mem-m < need.bytes {
				continue
			}
			left := float64(d.units-u-need.units)/float64(d.units) + float64(d.mem-m-need.bytes)/float64(d.mem)
			if cur, seen := best[node]; !seen || (policy == api.PlacementSpread) == (left > cur) {
				best[node] = left
			}
		}
	}
	return topNodes(best, policy, k), nil
}

// topNodes names the k best nodes of best (a node's free fraction after the
// pod), by policy; ties, and first fit, by name.
func topNodes(best map[string]float64, policy api.Placement, k int) []string {
	names := make([]string, 0, len(best))
	for n := range best {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := best[names[i]], best[names[j]]
		if a != b && policy != api.PlacementFirstFit {
			return (policy == api.PlacementSpread) == (a > b)
		}
		return names[i] < names[j]
	})
	return names[:min(k, len(names))]
}

// narrowDRA is PreFilter's result for a pod with ResourceClaims: the
// candidate nodes when its claims are narrowable and some node has room by
// the claims' books (nil: every node; also once the pod was widened).
func (p *Plugin) narrowDRA(c *cycle, pod *corev1.Pod, claims []*resourceapi.ResourceClaim, missing int, nodes []fwk.NodeInfo) *fwk.PreFilterResult {
	if p.candidates == 0 || missing > 0 || !narrowable(claims) || p.wait.widened(pod) {
		return nil
	}
	st, err := p.preempt.dra.allocatedState()
	if err != nil {
		return nil
	}
	c.draState = st
	names, err := p.preempt.dra.draCandidates(pod, nodes, st, c.draNeed, p.alloc.Policy(c.req), min(p.candidates, draCandidateNodes))
	if err != nil || len(names) == 0 {
		return nil
	}
	c.narrowed = true
	return &fwk.PreFilterResult{NodeNames: sets.New(names...)}
}
