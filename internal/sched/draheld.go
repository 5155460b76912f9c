package sched

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"
)

// podClaims are the claims allocated on node n's devices that the node's
// pods name (the claim tracker's: assumed allocations included), and one
// claim reserved for nobody holding what st, the tracker's allocated state
// (in-flight allocations included) gathered just before (startDryRun: not
// PreFilter's, which a claim released since would outlive), has on the
// node's devices beyond them (the claim of a pod gone and not deallocated
// yet, of no pod, or in flight): nothing frees that one. A lookup per pod of the node, where the
// index of every claim of the cluster (draSnapshot without a state) cost a
// DRA preemptor's first try a tenth of its CPU in a full cluster.
func (e *draEnv) podClaims(ni fwk.NodeInfo, n *draNode, st *structured.AllocatedState) []*resourceapi.ResourceClaim {
	var held []*resourceapi.ResourceClaim
	seen := sets.New[types.UID]()
	for _, pi := range ni.GetPods() {
		pod := pi.GetPod()
		for _, name := range claimNames(pod) {
			c, err := e.dra.ResourceClaims().Get(pod.Namespace, name)
			if err != nil || c.Status.Allocation == nil || seen.Has(c.UID) || !n.holds(c) {
				continue
			}
			seen.Insert(c.UID)
			held = append(held, c)
		}
	}
	if rest := n.unattributed(held, st); rest != nil {
		held = append(held, rest)
	}
	return held
}

// holds reports whether c is allocated a device of the node's pools.
func (n *draNode) holds(c *resourceapi.ResourceClaim) bool {
	for _, r := range c.Status.Allocation.Devices.Results {
		if n.pools.Has(poolKey(r.Driver, r.Pool)) {
			return true
		}
	}
	return false
}

// devHeld is what claims hold of one device: whole, or capacities.
type devHeld struct {
	whole bool
	caps  map[resourceapi.QualifiedName]resource.Quantity
}

// unattributed is a claim reserved for nobody with what st holds of the
// node's devices beyond what held holds (nil: nothing).
func (n *draNode) unattributed(held []*resourceapi.ResourceClaim, st *structured.AllocatedState) *resourceapi.ResourceClaim {
	mine := map[structured.DeviceID]*devHeld{}
	for _, c := range held {
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue // (not in the allocated state either)
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			u := mine[id]
			if u == nil {
				u = &devHeld{caps: map[resourceapi.QualifiedName]resource.Quantity{}}
				mine[id] = u
			}
			if r.ShareID == nil {
				u.whole = true
				continue
			}
			for k, q := range r.ConsumedCapacity {
				v := u.caps[k]
				v.Add(q)
				u.caps[k] = v
			}
		}
	}
	var out []resourceapi.DeviceRequestAllocationResult
	for _, id := range n.deviceIDs() {
		u := mine[id]
		res := resourceapi.DeviceRequestAllocationResult{Request: "unattributed", Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String()}
		if st.AllocatedDevices.Has(id) && (u == nil || !u.whole) {
			out = append(out, res)
		}
		var extra map[resourceapi.QualifiedName]resource.Quantity
		for k, q := range st.AggregatedCapacity[id] {
			left := q.DeepCopy()
			if u != nil {
				left.Sub(u.caps[k])
			}
			if left.Sign() > 0 {
				if extra == nil {
					extra = map[resourceapi.QualifiedName]resource.Quantity{}
				}
				extra[k] = left
			}
		}
		if extra != nil {
			res.ShareID, res.ConsumedCapacity = ptr.To(types.UID("unattributed")), extra
			out = append(out, res)
		}
	}
	if len(out) == 0 {
		return nil
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "(unattributed)", UID: types.UID("unattributed/" + n.node.Name)}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: out}}
	return c
}
