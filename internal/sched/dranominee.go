package sched

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"
)

// A pod nominated by a preemption comes back to its nominated node, and
// when a device there has its share free (nominatedFit) the allocator is
// shown that node's slices alone. The claim tracker's GatherAllocatedState
// copies the consumed capacity of every allocated device in the cluster
// (most of a DRA preemptor's second try: its cost grows with the cluster,
// not with the node). For such a pod the DynamicResources plugin is handed
// instead the same state read for the node's pools alone (nomineeState):
// what the tracker's cache holds allocated there (the claims the claim
// informer's pool index and the node's pods name) and the allocations in
// flight for the node's pods, as GatherAllocatedState counts them. The
// view (drasteer.go) keeps it only when the candidates it computes from it
// are that node alone; otherwise the ledger's nodes are read the same way
// (draledger.go), and where the ledger cannot tell, the state is gathered
// whole, in place.

// candidates are the pod's candidate nodes and their slices among all,
// computed from st. A narrowed pod's st, still empty (lazyRead), is read
// for its nominated node's pools alone and kept when that makes the node
// the one candidate; else, by the ledger (draledger.go), for the nodes it
// ranks first, kept when one of them has the share free, or when none has
// and GPUSlice's PreFilter refuses the pod; else the state is gathered
// whole into st (the DynamicResources plugin holds st, and builds its
// allocator from it once the slices are listed). refused: the pod is
// refused with no candidate and no state read beyond the ledger's.
func (s *steer) candidates(c *steerCycle, n *narrowing, all []*resourceapi.ResourceSlice, st *structured.AllocatedState) (
	names []string, sl []*resourceapi.ResourceSlice, refused bool, err error) {
	if lz := c.lazy; lz != nil && lz.st == st {
		if ni := nodeNamed(n.nodes, lz.node); ni != nil && n.env.nomineeState(ni, all, st) {
			names, sl := n.env.candidatesIn(n.pod, n.nodes, all, st, c.busy, n.need, c.policy, n.k, true)
			if len(names) == 1 && names[0] == lz.node {
				lz.partial = true
				s.metrics().stateRead(stateNode)
				return names, sl, false, nil
			}
		}
		if lz.node != "" {
			*st = *emptyState() // (the node's read, whole or cut short: the ledger's nodes are read afresh)
		}
		names, sl, ok := n.env.ledgerCandidates(n.pod, n.nodes, all, st, c.busy, n.need, c.policy, n.k)
		if ok && (len(names) > 0 || n.refused) {
			lz.partial = true
			s.metrics().stateRead(stateLedger)
			return names, sl, len(names) == 0, nil
		}
		seq := s.changes().now()
		full, err := n.env.allocatedState()
		if err != nil {
			return nil, nil, false, err
		}
		*st = *full
		c.seq.Store(seq)
		lz.st = nil
		s.metrics().stateRead(stateLedgerThenGathered)
	}
	names, sl = n.env.candidatesIn(n.pod, n.nodes, all, st, c.busy, n.need, c.policy, n.k, true)
	return names, sl, false, nil
}

// emptyState is an allocated state holding nothing.
func emptyState() *structured.AllocatedState {
	return &structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
}

// poolID is a device pool.
type poolID struct{ driver, pool string }

// poolSet is a node's few pools, compared in place (no hash of every
// claim result's names: without the pool index every claim is read).
type poolSet []poolID

// with is s with sl's pool (s itself when it has it).
func (s poolSet) with(sl *resourceapi.ResourceSlice) poolSet {
	if s.has(sl.Spec.Driver, sl.Spec.Pool.Name) {
		return s
	}
	return append(s, poolID{sl.Spec.Driver, sl.Spec.Pool.Name})
}

func (s poolSet) has(driver, pool string) bool {
	for _, p := range s {
		if p.pool == pool && p.driver == driver {
			return true
		}
	}
	return false
}

// nomineeState fills into (an emptyState) with what the claim tracker's
// allocated state holds on the pools of ni's node's slices among all: the
// devices and shares allocated there (claims in the tracker's cache) and
// those in flight for claims of the node's pods (a claim allocated on a
// node's devices is one of a pod placed there: in flight, its pod is
// assumed there). The in-flight allocations are read before the cache: one
// whose write ends in between is in the cache by then (the plugin assumes
// the written claim before it drops the in-flight one). It reports false,
// into left partly filled, where this cannot be the state the allocator
// reads: consumable capacity off (GatherAllocatedState is not asked then),
// a slice of no node among all (devices any node's pods may have in
// flight), the node without slices, or a pod there whose extended-resource
// claim (in flight under a UID not known here) is not made yet.
func (e *draEnv) nomineeState(ni fwk.NodeInfo, all []*resourceapi.ResourceSlice, into *structured.AllocatedState) bool {
	if !e.features.ConsumableCapacity {
		return false
	}
	node := ni.Node().Name
	var pools poolSet
	for _, sl := range all {
		switch {
		case sl.Spec.NodeName == nil:
			return false
		case *sl.Spec.NodeName == node:
			pools = pools.with(sl)
		}
	}
	return e.nodeState(ni, pools, into)
}

// nodeState is nomineeState's read for pools, those of ni's node's slices
// (all of them, of every driver): false when there are none, or where a pod
// on the node has an extended-resource claim not made yet.
func (e *draEnv) nodeState(ni fwk.NodeInfo, pools poolSet, into *structured.AllocatedState) bool {
	if len(pools) == 0 {
		return false
	}
	tracker := e.dra.ResourceClaims()
	for _, pi := range ni.GetPods() {
		pod := pi.GetPod()
		if e.mappedClaim(pod) != nil {
			return false
		}
		for _, name := range claimNames(pod) {
			if c, err := tracker.Get(pod.Namespace, name); err == nil {
				addAllocation(into, tracker.GetPendingAllocation(c.UID), pools)
			}
		}
	}
	claims, ok := e.claimsOn(ni, pools)
	if !ok {
		return false
	}
	for _, c := range claims {
		addAllocation(into, c.Status.Allocation, pools)
	}
	return true
}

// claimsOn are the claims, as the claim tracker has them, that may be
// allocated on pools: with the pool index, the claims the claim informer
// has allocated there and the claims of the node's pods (those of the
// pods' bindings, written and assumed before the informer has them),
// each once; without it, every claim. The informer's store is never older
// than the tracker's cache (which the informer's events fill), so a claim
// the tracker holds on pools is indexed there, unless the informer has
// it deallocated or deleted already (newer than the tracker, and as the
// API server has it).
func (e *draEnv) claimsOn(ni fwk.NodeInfo, pools poolSet) ([]*resourceapi.ResourceClaim, bool) {
	tracker := e.dra.ResourceClaims()
	if e.byPool == nil {
		claims, err := tracker.List()
		return claims, err == nil
	}
	keys := sets.New[types.NamespacedName]()
	for _, p := range pools {
		objs, err := e.byPool.ByIndex(claimPoolIndex, poolKey(p.driver, p.pool))
		if err != nil {
			return nil, false
		}
		for _, o := range objs {
			if c, ok := o.(*resourceapi.ResourceClaim); ok {
				keys.Insert(types.NamespacedName{Namespace: c.Namespace, Name: c.Name})
			}
		}
	}
	for _, pi := range ni.GetPods() {
		pod := pi.GetPod()
		for _, name := range claimNames(pod) {
			keys.Insert(types.NamespacedName{Namespace: pod.Namespace, Name: name})
		}
	}
	out := make([]*resourceapi.ResourceClaim, 0, len(keys))
	for k := range keys {
		if c, err := tracker.Get(k.Namespace, k.Name); err == nil {
			out = append(out, c)
		}
	}
	return out, true
}

// claimPoolIndex indexes the claim informer's claims by the pools
// (driver/pool) they are allocated on.
const claimPoolIndex = "gpuslice.io/allocated-pool"

// indexClaimPools adds claimPoolIndex to the claim informer (once per
// informer: a second profile's plugin finds it there) and returns its
// store; nil when it cannot be added.
func indexClaimPools(inf cache.SharedIndexInformer) cache.Indexer {
	if _, ok := inf.GetIndexer().GetIndexers()[claimPoolIndex]; !ok {
		if err := inf.AddIndexers(cache.Indexers{claimPoolIndex: claimPools}); err != nil {
			return nil
		}
	}
	return inf.GetIndexer()
}

// claimPools is claimPoolIndex's function: the pools of a claim's
// allocation results.
func claimPools(obj any) ([]string, error) {
	c, ok := obj.(*resourceapi.ResourceClaim)
	if !ok || c.Status.Allocation == nil {
		return nil, nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		if k := poolKey(r.Driver, r.Pool); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// addAllocation adds to st the devices of a's results on pools, as the
// tracker counts them with consumable capacity on: a result with a share
// ID is that share and its consumed capacity, one without it the device;
// admin access holds nothing. A nil a adds nothing.
func addAllocation(st *structured.AllocatedState, a *resourceapi.AllocationResult, pools poolSet) {
	if a == nil {
		return
	}
	for _, r := range a.Devices.Results {
		if ptr.Deref(r.AdminAccess, false) || !pools.has(r.Driver, r.Pool) {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID == nil {
			st.AllocatedDevices.Insert(id)
			continue
		}
		st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
		if r.ConsumedCapacity != nil {
			st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
		}
	}
}

// nodeNamed is the NodeInfo of the named node among nodes (nil: none).
func nodeNamed(nodes []fwk.NodeInfo, name string) fwk.NodeInfo {
	for _, ni := range nodes {
		if n := ni.Node(); n != nil && n.Name == name {
			return ni
		}
	}
	return nil
}

// lazyOf is a narrowed pod's lazy read: its nominated node's ("": none).
func lazyOf(pod *corev1.Pod) *lazyRead {
	return &lazyRead{node: pod.Status.NominatedNodeName}
}

// lazyRead is a cycle's state read for some nodes alone (candidates): st,
// the state handed to the DynamicResources plugin (empty until the view
// fills it); partial, it holds those nodes' pools alone.
type lazyRead struct {
	node    string // the nominated node ("": none)
	st      *structured.AllocatedState
	partial bool
}
