package sched

import (
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

// devFree is what one shared device has free.
type devFree struct {
	node                 string
	units, mem           int64 // free
	totalUnits, totalMem int64
	holders              int
}

// draCandidates names up to k nodes among nis (the pod's node selector
// and affinity matching) with a device that has need free, best first by
// policy (binpack: the fullest such device; spread: the emptiest).
func (e *draEnv) draCandidates(pod *corev1.Pod, nis []fwk.NodeInfo, need claimNeed, policy api.Placement, k int) ([]string, error) {
	aff := nodeaffinity.GetRequiredNodeAffinity(pod)
	ok := map[string]bool{}
	for _, ni := range nis {
		if m, err := aff.Match(ni.Node()); err == nil && m {
			ok[ni.Node().Name] = true
		}
	}
	all, err := e.dra.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, err
	}
	devs := map[structured.DeviceID]*devFree{}
	for _, s := range all {
		if s.Spec.NodeName == nil || !ok[*s.Spec.NodeName] {
			continue
		}
		for _, d := range s.Spec.Devices {
			u, m := deviceCap(d, capUnits), deviceCap(d, capMemory)
			if u <= 0 || m <= 0 || len(d.Taints) > 0 {
				continue
			}
			devs[structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name)] = &devFree{node: *s.Spec.NodeName, units: u, mem: m, totalUnits: u, totalMem: m}
		}
	}
	claims, err := e.dra.ResourceClaims().List()
	if err != nil {
		return nil, err
	}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			d := devs[structured.MakeDeviceID(r.Driver, r.Pool, r.Device)]
			if d == nil {
				continue
			}
			d.holders++
			if r.ShareID == nil {
				d.units, d.mem = 0, 0
				continue
			}
			d.units -= capValue(r.ConsumedCapacity, capUnits)
			d.mem -= capValue(r.ConsumedCapacity, capMemory)
		}
	}
	// Per node, the best device that fits: its free fraction after the pod.
	best := map[string]float64{}
	for _, d := range devs {
		fits := need.whole && d.holders == 0 || !need.whole && d.units >= need.units && d.mem >= need.bytes
		if !fits {
			continue
		}
		left := float64(d.units-need.units)/float64(d.totalUnits) + float64(d.mem-need.bytes)/float64(d.totalMem)
		if need.whole {
			left = 0
		}
		if cur, seen := best[d.node]; !seen || (policy == api.PlacementSpread) == (left > cur) {
			best[d.node] = left
		}
	}
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
	return names[:min(k, len(names))], nil
}

// narrowDRA is PreFilter's result for a pod with ResourceClaims: the
// candidate nodes when its claims are narrowable and some node has room by
// the claims' books (nil: every node; also once the pod was widened).
func (p *Plugin) narrowDRA(c *cycle, pod *corev1.Pod, claims []*resourceapi.ResourceClaim, missing int, nodes []fwk.NodeInfo) *fwk.PreFilterResult {
	if p.candidates == 0 || missing > 0 || !narrowable(claims) || p.wait.widened(pod) {
		return nil
	}
	names, err := p.preempt.dra.draCandidates(pod, nodes, c.draNeed, p.alloc.Policy(c.req), p.candidates)
	if err != nil || len(names) == 0 {
		return nil
	}
	c.narrowed = true
	return &fwk.PreFilterResult{NodeNames: sets.New(names...)}
}
