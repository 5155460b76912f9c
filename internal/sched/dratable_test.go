package sched

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// onlyOf are the slices of all of the nodes named and of no node, in
// all's order: the definition of the candidates' slices (candidatesIn
// reads them from the table's index).
func onlyOf(all []*resourceapi.ResourceSlice, names []string) []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	for _, sl := range all {
		if sl.Spec.NodeName == nil || *sl.Spec.NodeName == "" || slices.Contains(names, *sl.Spec.NodeName) {
			out = append(out, sl)
		}
	}
	return out
}

// matchingNodes is the set of nodes of nis the pod's node selector and
// required affinity admit; nil when the pod has neither (every node): the
// definition nodeMatch answers by name, node by node.
func matchingNodes(pod *corev1.Pod, nis []fwk.NodeInfo) map[string]bool {
	a := pod.Spec.Affinity
	if len(pod.Spec.NodeSelector) == 0 && (a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil) {
		return nil
	}
	aff := nodeaffinity.GetRequiredNodeAffinity(pod)
	ok := make(map[string]bool, len(nis))
	for _, ni := range nis {
		if m, err := aff.Match(ni.Node()); err == nil && m {
			ok[ni.Node().Name] = true
		}
	}
	return ok
}

// fullWalk is the definition of the candidates: the pod's nominated node
// alone if the pod's selector admits it and a device of it fits; else
// every device of every slice read with what st holds of it (no pool
// skipped, nothing cached), each node's best fit, the k best by policy.
func fullWalk(pod *corev1.Pod, nis []fwk.NodeInfo, all []*resourceapi.ResourceSlice, st *structured.AllocatedState, busy map[string]bool, need claimNeed, policy api.Placement, k int) []string {
	ok := matchingNodes(pod, nis)
	devices := (&devTable{}).devices(all)
	if nn := pod.Status.NominatedNodeName; nn != "" && (ok == nil || ok[nn]) {
		for _, devs := range devices {
			for _, d := range devs {
				if u, m := consumed(st, d); d.node == nn && !busy[d.uuid] {
					if _, fits := fitOf(&d, u, m, need); fits {
						return []string{nn}
					}
				}
			}
		}
	}
	top := newTopFits(policy, k)
	for _, devs := range devices {
		for _, d := range devs {
			if d.node == "" || ok != nil && !ok[d.node] || busy[d.uuid] {
				continue
			}
			u, m := consumed(st, d)
			if f, fits := fitOf(&d, u, m, need); fits {
				top.add(f)
			}
		}
	}
	return top.names()
}

// randomCluster is a cluster of n nodes: each with one or two slices of
// gpuslice.io (a pool each, or one pool of two slices), some with another
// driver's slice; one slice of no node; devices of two sizes, some
// tainted; and claims holding shares or whole devices of some of them.
type randomCluster struct {
	r      *rand.Rand
	nis    []fwk.NodeInfo
	slices []*resourceapi.ResourceSlice
}

func newRandomCluster(r *rand.Rand, n int) *randomCluster {
	c := &randomCluster{r: r}
	for i := range n {
		node := fmt.Sprintf("n%02d", i)
		ni := nodeInfo(node)
		if r.IntN(4) > 0 {
			ni.Node().Labels = map[string]string{"group": "g"}
		}
		c.nis = append(c.nis, ni)
		c.slices = append(c.slices, c.slice(node, node, "a"))
		switch r.IntN(4) {
		case 0:
			c.slices = append(c.slices, c.slice(node, node+"-b", "b"))
		case 1:
			c.slices = append(c.slices, c.slice(node, node, "b")) // (a pool of two slices)
		case 2:
			c.slices = append(c.slices, &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: "other.example.com",
				NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node}, Devices: []resourceapi.Device{{Name: "nic"}}}})
		}
	}
	c.slices = append(c.slices, &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: "other.example.com",
		Pool: resourceapi.ResourcePool{Name: "net"}, AllNodes: ptr.To(true), Devices: []resourceapi.Device{{Name: "nic"}}}})
	return c
}

// slice is a new slice object of node's pool with 1-4 GPUs named by part.
func (c *randomCluster) slice(node, pool, part string) *resourceapi.ResourceSlice {
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	sl := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: testDriver, NodeName: ptr.To(node),
		Pool: resourceapi.ResourcePool{Name: pool}}}
	for g := range 1 + c.r.IntN(4) {
		units, mem := []int64{100, 50}[c.r.IntN(2)], []int64{16, 8}[c.r.IntN(2)]
		d := resourceapi.Device{Name: fmt.Sprintf("gpu-%s%d", part, g), AllowMultipleAllocations: ptr.To(true),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%s%d", pool, part, g))}},
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{capUnits: {Value: q(units)}, capMemory: {Value: q(mem)}}}
		if c.r.IntN(10) == 0 {
			d.Taints = []resourceapi.DeviceTaint{{Key: "k", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}
		sl.Spec.Devices = append(sl.Spec.Devices, d)
	}
	return sl
}

// claims hold shares (or whole devices) of some GPUs.
func (c *randomCluster) claims() []*resourceapi.ResourceClaim {
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	var out []*resourceapi.ResourceClaim
	for _, sl := range c.slices {
		if sl.Spec.Driver != testDriver {
			continue
		}
		for _, d := range sl.Spec.Devices {
			if c.r.IntN(3) > 0 {
				continue
			}
			r := resourceapi.DeviceRequestAllocationResult{Driver: testDriver, Pool: sl.Spec.Pool.Name, Device: d.Name}
			if c.r.IntN(5) > 0 {
				r.ShareID = ptr.To(types.UID(fmt.Sprint(len(out))))
				r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{capUnits: q(int64(1 + c.r.IntN(50))), capMemory: q(int64(1 + c.r.IntN(8)))}
			}
			cl := &resourceapi.ResourceClaim{}
			cl.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{r}}}
			out = append(out, cl)
		}
	}
	return out
}

// TestCandidatesIndexIsFullWalk: the candidates and their slices read
// through the table's index (pools the state holds marked, the free fit of
// the other slices cached, the candidates' slices from the node index) are
// the full walk's and onlyOf's, pod after pod on one table, with slices
// replaced, listed in another order and claims changing between cycles.
func TestCandidatesIndexIsFullWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(32, 7))
	env := &draEnv{}
	policies := []api.Placement{api.PlacementBinpack, api.PlacementSpread, api.PlacementFirstFit}
	selected := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"group": "g"}}}
	for cluster := range 20 {
		c := newRandomCluster(r, 3+r.IntN(12))
		for cycle := range 30 {
			if r.IntN(4) == 0 { // a slice replaced (its node's devices published again)
				i := r.IntN(len(c.slices))
				if old := c.slices[i]; old.Spec.Driver == testDriver {
					c.slices[i] = c.slice(*old.Spec.NodeName, old.Spec.Pool.Name, "a")
				}
			}
			all := slices.Clone(c.slices)
			r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
			st, _ := fakeClaims{c: c.claims()}.GatherAllocatedState()
			var busy map[string]bool
			if r.IntN(3) == 0 {
				busy = map[string]bool{}
				for _, sl := range all {
					for _, d := range sl.Spec.Devices {
						if u := d.Attributes["uuid"].StringValue; u != nil && r.IntN(6) == 0 {
							busy[*u] = true
						}
					}
				}
			}
			pod := &corev1.Pod{}
			if r.IntN(3) == 0 {
				pod = selected.DeepCopy()
			}
			if r.IntN(3) == 0 { // (one nominated by a preemption; "nx" is no node)
				pod.Status.NominatedNodeName = []string{"n00", "n01", "n02", "nx"}[r.IntN(4)]
			}
			need := claimNeed{units: []int64{10, 25, 50, 60}[r.IntN(4)], bytes: []int64{1, 4, 8}[r.IntN(3)]}
			policy, k := policies[r.IntN(3)], 1+r.IntN(5)
			want := fullWalk(pod, c.nis, all, st, busy, need, policy, k)
			got, sl := env.candidatesIn(pod, c.nis, all, st, busy, need, policy, k, true)
			if !slices.Equal(got, want) {
				t.Fatalf("cluster %d cycle %d (%s, k %d, need %+v): candidates %v, want %v", cluster, cycle, policy, k, need, got, want)
			}
			if wantSl := onlyOf(all, want); len(want) > 0 && !slices.Equal(sl, wantSl) || len(want) == 0 && sl != nil {
				t.Fatalf("cluster %d cycle %d: %d candidate slices, want %d (onlyOf)", cluster, cycle, len(sl), len(wantSl))
			}
		}
	}
}

// TestDeviceViewFewIsMany: the view of many slices (the state's pools
// listed once) shows each slice as the view of that slice alone does (its
// devices looked up in the state), for each policy, busy GPUs or none.
func TestDeviceViewFewIsMany(t *testing.T) {
	r := rand.New(rand.NewPCG(32, 8))
	for range 20 {
		c := newRandomCluster(r, 12+r.IntN(8))
		st, _ := fakeClaims{c: c.claims()}.GatherAllocatedState()
		busy := map[string]bool{}
		for _, sl := range c.slices {
			for _, d := range sl.Spec.Devices {
				if u := d.Attributes["uuid"].StringValue; u != nil && r.IntN(8) == 0 {
					busy[*u] = true
				}
			}
		}
		for _, policy := range []api.Placement{api.PlacementBinpack, api.PlacementSpread, api.PlacementFirstFit} {
			for _, b := range []map[string]bool{nil, busy} {
				s := &steer{}
				cyc := &steerCycle{policy: policy, busy: b}
				many := s.view(c.slices, cyc, st, len(c.slices))
				for i, sl := range c.slices {
					one := s.view([]*resourceapi.ResourceSlice{sl}, cyc, st, len(c.slices))
					if !slices.Equal(deviceNames(many[i]), deviceNames(one[0])) || (many[i] == sl) != (one[0] == sl) {
						t.Fatalf("%s, busy %d: slice %d %v in the view of all, %v alone", policy, len(b), i, deviceNames(many[i]), deviceNames(one[0]))
					}
				}
			}
		}
	}
}
