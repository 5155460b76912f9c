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
// (in-flight allocations included), has on the node's devices beyond them
// (the claim of a pod gone and not deallocated yet, of no pod, or in
// flight): nothing frees that one. st must be as recent as the claims'
// reading (startDryRun: a claim released since st was gathered would
// outlive in it). A lookup per pod of the node, where the index of every
// claim of the cluster (draSnapshot without a state) cost a DRA
// preemptor's first try a tenth of its CPU in a full cluster.
func (e *draEnv) podClaims(ni fwk.NodeInfo, n *draNode, st *structured.AllocatedState) []*resourceapi.ResourceClaim {
	held := e.nodePodClaims(ni, n)
	if rest := n.unattributed(held, st); rest != nil {
		held = append(held, rest)
	}
	return held
}

// podClaimsAgree is the node's pods' claims allocated there when st, a
// state gathered earlier, agrees with them: every one of them is in it,
// and it holds nothing on the node's devices beyond them. Otherwise (ok
// false) st is not the node's state now, or the node holds what the pods'
// claims do not say (a gone pod's claim, one in flight): the caller reads
// it with a state gathered now.
func (e *draEnv) podClaimsAgree(ni fwk.NodeInfo, n *draNode, st *structured.AllocatedState) (held []*resourceapi.ResourceClaim, ok bool) {
	held = e.nodePodClaims(ni, n)
	for _, c := range held {
		if !n.inState(c, st) {
			return nil, false
		}
	}
	return held, n.unattributed(held, st) == nil
}

// nodePodClaims are the claims allocated on node n's devices that the
// node's pods name, each once.
func (e *draEnv) nodePodClaims(ni fwk.NodeInfo, n *draNode) []*resourceapi.ResourceClaim {
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
	return held
}

// inState tells whether st has c's allocation on the node's devices (as
// the claim tracker counts it: a share by its ID, a device whole).
func (n *draNode) inState(c *resourceapi.ResourceClaim, st *structured.AllocatedState) bool {
	for _, r := range c.Status.Allocation.Devices.Results {
		if !n.pools.Has(poolKey(r.Driver, r.Pool)) || r.AdminAccess != nil && *r.AdminAccess {
			continue // (admin access is in no state)
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID != nil && n.features.ConsumableCapacity {
			if !st.AllocatedSharedDeviceIDs.Has(structured.MakeSharedDeviceID(id, r.ShareID)) {
				return false
			}
		} else if !st.AllocatedDevices.Has(id) {
			return false
		}
	}
	return true
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
