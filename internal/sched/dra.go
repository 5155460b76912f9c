package sched

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
)

// Capacity names of gpuslice's DRA devices (docs/dra.md): a share's units
// and memory. Claims of other drivers free capacity under their own names,
// which the allocator (the judge of every fit) counts; the victims are
// chosen by these two and by whole devices.
const (
	capUnits  resourceapi.QualifiedName = "units"
	capMemory resourceapi.QualifiedName = "memory"
)

// draEnv is what the DRA path reads of the scheduler: its claim tracker,
// slices and classes (the DynamicResources plugin's, so both see one
// state), the allocator's features and a CEL cache.
type draEnv struct {
	dra      fwk.SharedDRAManager
	features structured.Features
	cel      *cel.Cache
	// table: the shared devices of each ResourceSlice (dracandidates.go).
	table devTable
	// changes: the claim allocations changed, by pool (nil: not known).
	changes *claimChanges
	// byPool: the claim informer's store, indexed by the pools claims
	// are allocated on (claimPoolIndex; nil: not indexed).
	byPool cache.Indexer
	// byNode: the slices of the last list by node (draSnapshot.read).
	byNode slicesByNode
}

func newDRAEnv(fh fwk.Handle, fts feature.Features) *draEnv {
	if fh.SharedDRAManager() == nil {
		return nil
	}
	e := &draEnv{dra: fh.SharedDRAManager(), features: dynamicresources.AllocatorFeatures(fts),
		cel: cel.NewCache(10, cel.Features{EnableConsumableCapacity: fts.EnableDRAConsumableCapacity,
			EnableListTypeAttributes: fts.EnableDRAListTypeAttributes})}
	// The claim informer the tracker is built on (the scheduler's shared one).
	if f := fh.SharedInformerFactory(); f != nil {
		ch := newClaimChanges()
		inf := f.Resource().V1().ResourceClaims().Informer()
		if _, err := inf.AddEventHandler(ch.handler()); err == nil {
			e.changes = ch // (else nil: every dry run gathers its state)
		}
		e.byPool = indexClaimPools(inf) // (nil on an error: nomineeState lists every claim)
	}
	return e
}

// hasClaims reports whether a pod asks for devices through ResourceClaims
// (its own, or one the scheduler made for extended resources).
func hasClaims(pod *corev1.Pod) bool {
	return len(pod.Spec.ResourceClaims) > 0 ||
		pod.Status.ExtendedResourceClaimStatus != nil && pod.Status.ExtendedResourceClaimStatus.ResourceClaimName != ""
}

// claimNames are the names of a pod's ResourceClaims that exist (a
// template's claim once the claim controller made it; the extended-resource
// claim once the scheduler did).
func claimNames(pod *corev1.Pod) []string {
	var out []string
	for i := range pod.Spec.ResourceClaims {
		n, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err == nil && n != nil {
			out = append(out, *n)
		}
	}
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil && s.ResourceClaimName != "" {
		out = append(out, s.ResourceClaimName)
	}
	return out
}

// pendingClaims are a pod's claims not allocated yet: what placing it on a
// node must allocate there. missing counts the claims that do not exist yet.
func (e *draEnv) pendingClaims(pod *corev1.Pod) (out []*resourceapi.ResourceClaim, missing int) {
	names := claimNames(pod)
	missing = len(pod.Spec.ResourceClaims) - len(names)
	if pod.Status.ExtendedResourceClaimStatus != nil {
		missing++
	}
	for _, n := range names {
		c, err := e.dra.ResourceClaims().Get(pod.Namespace, n)
		if err != nil {
			missing++
			continue
		}
		if c.Status.Allocation == nil {
			out = append(out, c)
		}
	}
	if c := e.mappedClaim(pod); c != nil { // dramapped.go
		out = append(out, c)
	}
	return out, max(missing, 0)
}

// draNode is one node's devices and the claims allocated on them, read
// once per preemption on that node: fits asks the allocator whether claims
// can be allocated there with some claims' allocations gone.
type draNode struct {
	features structured.Features
	classes  structured.DeviceClassLister
	cel      *cel.Cache
	node     *corev1.Node
	slices   []*resourceapi.ResourceSlice
	// pools: the node's pools (driver/pool) and its devices' capacities.
	pools   sets.Set[string]
	devices map[structured.DeviceID]resourceapi.Device
	// held: the claims allocated on the node's devices.
	held []*resourceapi.ResourceClaim
}

func poolKey(driver, pool string) string { return driver + "/" + pool }

// draSnapshot is one read of the ResourceSlices and the allocated claims
// (as the claim tracker has them), indexed by node; a preemption's dry run
// reads many nodes from one snapshot. With state (the claim tracker's
// allocated state, in-flight allocations included) a node's claims are
// read from its pods when the node is (podClaims) instead of every claim
// at once.
type draSnapshot struct {
	once sync.Once
	err  error
	// fresh: the dry run's (startDryRun): with no state given, a node is
	// read with pre (the state PreFilter gathered, changes numbered up to
	// preSeq before it; nil: none) when no claim allocation on its pools
	// changed since and its pods' claims agree with it, else alone (its
	// pools' state read then, for the first dryNodeReads nodes), else with
	// a state gathered when the first such node is read; if that fails,
	// every claim is indexed.
	fresh  bool
	pre    *structured.AllocatedState
	preSeq uint64
	state  *structured.AllocatedState
	slices map[string][]*resourceapi.ResourceSlice // by node
	// alone: the nodes read alone so far (readAlone).
	alone atomic.Int32
	// gathered: the state gathered for the dry run (nil: not yet, or failed).
	gatherOnce sync.Once
	gathered   *structured.AllocatedState
	// held: every allocated claim by node, when no state is known.
	indexOnce sync.Once
	indexErr  error
	held      map[string][]*resourceapi.ResourceClaim
	// nodes: each node as read (readNode), for the next read of it (the
	// shortlist reads the nodes the dry run then reads again).
	nodesMu sync.Mutex
	nodes   map[string]*draNode
}

// read lists the slices once.
func (s *draSnapshot) read(e *draEnv) error {
	s.once.Do(func() {
		all, err := e.dra.ResourceSlices().ListWithDeviceTaintRules()
		if err != nil {
			s.err = fmt.Errorf("resource slices: %w", err)
			return
		}
		s.slices = e.byNode.of(all)
	})
	return s.err
}

// slicesByNode is the last list of slices seen by node: a list of the
// same objects in any order (the informer's, unchanged between the
// snapshots of a burst of preemptors) is not sorted again.
type slicesByNode struct {
	mu     sync.Mutex
	listed sets.Set[*resourceapi.ResourceSlice]
	byNode map[string][]*resourceapi.ResourceSlice // (read-only once made)
}

// of is all's slices of a node, by node name (read-only).
func (b *slicesByNode) of(all []*resourceapi.ResourceSlice) map[string][]*resourceapi.ResourceSlice {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byNode != nil && len(b.listed) == len(all) && !slices.ContainsFunc(all, func(sl *resourceapi.ResourceSlice) bool { return !b.listed.Has(sl) }) {
		return b.byNode
	}
	byNode := map[string][]*resourceapi.ResourceSlice{}
	for _, sl := range all {
		if sl.Spec.NodeName != nil {
			byNode[*sl.Spec.NodeName] = append(byNode[*sl.Spec.NodeName], sl)
		}
	}
	b.listed, b.byNode = sets.New(all...), byNode
	return byNode
}

// heldOn is what is allocated on the node's devices: its pods' claims and
// what the state holds there beyond them (podClaims), or, with no state,
// the claims the index of every claim puts there.
func (s *draSnapshot) heldOn(e *draEnv, ni fwk.NodeInfo, n *draNode) ([]*resourceapi.ResourceClaim, error) {
	if s.state != nil {
		return e.podClaims(ni, n, s.state), nil
	}
	if s.fresh {
		if s.pre != nil && !e.changes.since(n.pools, s.preSeq) {
			if held, ok := e.podClaimsAgree(ni, n, s.pre); ok {
				return held, nil
			}
		}
		if held, ok := s.readAlone(e, ni, n); ok {
			return held, nil
		}
		s.gatherOnce.Do(func() { s.gathered, _ = e.allocatedState() }) // (nil on an error: the index below)
		if s.gathered != nil {
			return e.podClaims(ni, n, s.gathered), nil
		}
	}
	if err := s.index(e); err != nil {
		return nil, err
	}
	return s.held[n.node.Name], nil
}

// dryNodeReads bounds the nodes a dry run reads alone (readAlone) before
// it gathers the whole state once for the rest: a read alone costs the
// node's claims (tens of microseconds), a gather every allocated device
// of the cluster (milliseconds at a thousand nodes); in a full cluster the
// shortlist reads a handful of nodes.
const dryNodeReads = 16

// readAlone reads what is allocated on the node's devices from the node's
// pools alone (nodeState: the tracker's claims there, by the pool index,
// and the allocations in flight for the node's pods), without the whole
// state, for the dry run's first dryNodeReads nodes; ok false: not read
// (no pool index, consumable capacity off, or past the bound).
func (s *draSnapshot) readAlone(e *draEnv, ni fwk.NodeInfo, n *draNode) ([]*resourceapi.ResourceClaim, bool) {
	if e.byPool == nil || !e.features.ConsumableCapacity || s.alone.Add(1) > dryNodeReads {
		return nil, false
	}
	var pools poolSet
	for _, sl := range n.slices {
		pools = pools.with(sl)
	}
	st := emptyState()
	if !e.nodeState(ni, pools, st) {
		return nil, false
	}
	return e.podClaims(ni, n, st), true
}

// index puts every allocated claim on the nodes of its devices' pools, once.
func (s *draSnapshot) index(e *draEnv) error {
	s.indexOnce.Do(func() {
		claims, err := e.dra.ResourceClaims().List()
		if err != nil {
			s.indexErr = fmt.Errorf("resource claims: %w", err)
			return
		}
		type pool struct{ driver, name string } // (no key string made per claim)
		poolNode := map[pool]string{}
		for node, sls := range s.slices {
			for _, sl := range sls {
				poolNode[pool{sl.Spec.Driver, sl.Spec.Pool.Name}] = node
			}
		}
		s.held = map[string][]*resourceapi.ResourceClaim{}
		var nodes []string // the claim's nodes so far
		for _, c := range claims {
			if c.Status.Allocation == nil {
				continue
			}
			nodes = nodes[:0]
			for _, r := range c.Status.Allocation.Devices.Results {
				if n, ok := poolNode[pool{r.Driver, r.Pool}]; ok && !slices.Contains(nodes, n) {
					nodes = append(nodes, n)
					s.held[n] = append(s.held[n], c)
				}
			}
		}
	})
	return s.indexErr
}

// startDryRun gives a preemption's dry run its snapshot (c.draSnap); with
// fromPreFilter its nodes are read with the allocated state PreFilter
// gathered where no claim allocation on the node's pools changed since
// (claimChanges, from the claim informer) and the node's pods' claims
// agree with it (each one allocated there is in it, and it holds nothing
// there beyond them); otherwise its first nodes each alone (readAlone: a
// state of the node's pools read then), and the rest with one state
// gathered then. podClaims reads the claims of the node's pods from the
// tracker when the node is read, and a claim released since PreFilter (a
// victim's, by the claim releaser) would still be in PreFilter's state but
// in no pod's claims: held by nobody (unattributed), freed by no eviction,
// and a pod beside it evicted for the room the release already made; a
// claim allocated since would be missing from it, its share counted free.
// What changes between the gather and a node's read (a dry run's time)
// still reads as above.
func (c *cycle) startDryRun() { c.draSnap = &draSnapshot{fresh: true} }

// fromPreFilter gives the dry run the state this cycle's PreFilter
// gathered (sd: DRAName's, nil: none), dated by the claim changes
// numbered before it.
func (s *draSnapshot) fromPreFilter(sd *steerData) {
	if sd != nil && sd.state != nil && !sd.partial {
		s.pre, s.preSeq = sd.state, sd.seq
	}
}

// readNode reads the node's local ResourceSlices and the claims allocated
// on their devices, from snap (nil: a fresh read). A node is read once per
// snapshot (its nodes come from one scheduling cycle's); each read gets a
// copy its caller may narrow (withoutBusy).
func (e *draEnv) readNode(snap *draSnapshot, ni fwk.NodeInfo) (*draNode, error) {
	if snap == nil {
		snap = &draSnapshot{}
	}
	name := ni.Node().Name
	snap.nodesMu.Lock()
	n, ok := snap.nodes[name]
	snap.nodesMu.Unlock()
	if !ok {
		var err error
		if n, err = e.readNodeOnce(snap, ni); err != nil {
			return nil, err
		}
		snap.nodesMu.Lock()
		if snap.nodes == nil {
			snap.nodes = map[string]*draNode{}
		}
		snap.nodes[name] = n
		snap.nodesMu.Unlock()
	}
	c := *n
	c.devices = maps.Clone(n.devices)
	return &c, nil
}

// readNodeOnce is readNode's read.
func (e *draEnv) readNodeOnce(snap *draSnapshot, ni fwk.NodeInfo) (*draNode, error) {
	if err := snap.read(e); err != nil {
		return nil, err
	}
	node := ni.Node()
	n := &draNode{features: e.features, classes: e.dra.DeviceClasses(), cel: e.cel, node: node, pools: sets.New[string](),
		devices: map[structured.DeviceID]resourceapi.Device{}, slices: snap.slices[node.Name]}
	for _, s := range n.slices {
		n.pools.Insert(poolKey(s.Spec.Driver, s.Spec.Pool.Name))
		for _, d := range s.Spec.Devices {
			n.devices[structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name)] = d
		}
	}
	if len(n.slices) == 0 {
		return n, nil // (no device of the node's: nothing held there)
	}
	held, err := snap.heldOn(e, ni, n)
	if err != nil {
		return nil, err
	}
	n.held = held
	return n, nil
}

// state is the allocated state of the node's devices without the claims in
// gone.
func (n *draNode) state(gone sets.Set[types.UID]) structured.AllocatedState {
	st := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	for _, c := range n.held {
		if gone.Has(c.UID) {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if r.ShareID != nil && n.features.ConsumableCapacity {
				st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
				if r.ConsumedCapacity != nil {
					st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
				}
				continue
			}
			st.AllocatedDevices.Insert(id)
		}
	}
	return st
}

// fits asks the stock allocator whether claims can all be allocated on the
// node once the claims in gone are deallocated.
func (n *draNode) fits(ctx context.Context, gone sets.Set[types.UID], claims []*resourceapi.ResourceClaim) (bool, error) {
	if len(claims) == 0 {
		return true, nil
	}
	if len(n.slices) == 0 {
		return false, nil
	}
	a, err := structured.NewAllocator(ctx, n.features, n.state(gone), n.classes, n.slices, n.cel)
	if err != nil {
		return false, fmt.Errorf("allocator: %w", err)
	}
	res, err := a.Allocate(ctx, n.node, claims)
	switch {
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return false, nil
	case err != nil:
		return false, err
	}
	return len(res) == len(claims), nil
}

// freed are the claims on the node whose every consumer is among pods: the
// claims evicting pods deallocates (a claim shared with a pod that stays
// frees nothing).
func (n *draNode) freed(pods sets.Set[types.UID]) sets.Set[types.UID] {
	out := sets.New[types.UID]()
	for _, c := range n.held {
		if releasedBy(c, pods) {
			out.Insert(c.UID)
		}
	}
	return out
}

// nodeUse is what the claims allocated on one node's shared devices hold:
// used sums, per device, the fractions of its units and of its memory held
// (a device allocated whole: 2); n devices of units and memory totals.
type nodeUse struct {
	used       float64
	n          int
	units, mem float64
}

// usage reads, for the named nodes, what the claims allocated on their
// devices of consumable units and memory (gpuslice.io's shape) hold, from
// the claim tracker's allocated state (in-flight allocations included).
// st is the state read earlier in the cycle (nil: read now); all the
// slices listed then, every slice of the named nodes among them (nil:
// listed now).
func (e *draEnv) usage(nodes sets.Set[string], st *structured.AllocatedState, all []*resourceapi.ResourceSlice) (map[string]*nodeUse, error) {
	var err error
	listed := 0 // (the cycle's list: the slices of some nodes, the table keeps the others')
	if all == nil {
		if all, err = e.dra.ResourceSlices().ListWithDeviceTaintRules(); err != nil {
			return nil, fmt.Errorf("resource slices: %w", err)
		}
		listed = len(all)
	}
	if st == nil {
		if st, err = e.allocatedState(); err != nil {
			return nil, err
		}
	}
	var mine []*resourceapi.ResourceSlice // (the named nodes' slices: the table is read for them alone)
	for _, sl := range all {
		if sl.Spec.NodeName != nil && nodes.Has(*sl.Spec.NodeName) {
			mine = append(mine, sl)
		}
	}
	out := make(map[string]*nodeUse, len(nodes))
	for i, devs := range e.table.devicesOf(mine, listed) {
		node := *mine[i].Spec.NodeName
		if len(devs) == 0 {
			continue
		}
		nu := out[node]
		if nu == nil {
			nu = &nodeUse{}
			out[node] = nu
		}
		for _, d := range devs {
			nu.n++
			nu.units += float64(d.units)
			nu.mem += float64(d.mem)
			if st.AllocatedDevices.Has(d.id) {
				nu.used += 2
				continue
			}
			u, m := consumed(st, d)
			nu.used += float64(u)/float64(d.units) + float64(m)/float64(d.mem)
		}
	}
	return out, nil
}

// candSlices are the slices of the candidate nodes names (and of no node)
// as a cycle's device view listed them.
type candSlices struct {
	names  sets.Set[string]
	slices []*resourceapi.ResourceSlice
}

// of is the slices when every node of nodes is a candidate (they hold
// every slice of those nodes), else nil.
func (c candSlices) of(nodes sets.Set[string]) []*resourceapi.ResourceSlice {
	if c.slices == nil || !c.names.IsSuperset(nodes) {
		return nil
	}
	return c.slices
}

// adds is what claims needing need add to a node of use (its average
// device): 2 a whole device.
func (u *nodeUse) adds(need claimNeed) float64 {
	if need.whole {
		return 2
	}
	if u.n == 0 || u.units == 0 || u.mem == 0 {
		return 0
	}
	return float64(need.units)/(u.units/float64(u.n)) + float64(need.bytes)/(u.mem/float64(u.n))
}
