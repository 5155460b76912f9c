package sched

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// A pod's first try (a preemptor's, in a full cluster) needs to know which
// nodes have a device with its share free, and the claim tracker's
// GatherAllocatedState answers that by copying the consumed capacity of
// every allocated device in the cluster (23 ms of CPU per try at 1,000
// nodes of 8 GPUs with two shares each, most of a DRA preemptor's cost
// there). The ledger keeps instead, per pool of the device table, what the
// claims allocated there hold of its devices and the most units and memory
// one of them has free, and reads a pool again only when the claim
// informer numbered a change on it since (claimChanges; the claim releaser
// numbers the releases it puts into the tracker). A pool is read from the
// claim informer's pool index, each claim as the tracker has it (counted
// when both say it is allocated there): so the ledger never counts a
// device fuller than the tracker did when the pool was read, and is freer
// where the tracker has an allocation the informer has not delivered yet
// (written by a binding) or one in flight. It is a hint: the nodes it
// ranks first are read exactly, node by node, as the nominated node is
// (nodeState: the tracker's claims on the node's pools and the
// allocations in flight for the node's pods), and those reads are the
// state the DynamicResources plugin is handed, for those nodes' slices
// alone. Where none of the nodes it counts with the share free has it, a
// pod that GPUSlice's PreFilter then refuses is refused without any read
// of the whole state (the allocator is shown no slice: on no node can it
// allocate); where too many nodes it counts so have not, the state is
// gathered whole, in place.
// A change the informer delivers to the tracker just before this handler
// numbers it is read at the next change of the pool: as a gather taken
// just before it would have missed it.

// ledgerHint bounds the nodes the ledger ranks for a pod, read exactly in
// that order until the pod's k candidates are found and ledgerSpare more
// were read: a node whose share a binding in flight holds (or one written
// and not yet delivered, or a release the informer delivered before the
// tracker has it) is read and passed over, and one a binding in flight
// made fuller than the ledger counts it is ranked by what it holds. When
// none of ledgerHint nodes has the share, the state is gathered whole:
// nodes past them may have it.
const (
	ledgerHint  = 64
	ledgerSpare = 4
)

// ledgerPool is the ledger's entry for one pool.
type ledgerPool struct {
	id   structured.DeviceID // (poolOnly)
	pool poolID
	key  string // poolKey
	// read: the pool was read, with nslices entries in the table's index,
	// and no change on it was numbered since (changedSince).
	read    bool
	nslices int
	// st: what its claims hold (nil: nothing); units, mem: the most free
	// on one of its shared devices (a share needing more of either fits
	// none of them).
	st         *structured.AllocatedState
	units, mem int64
}

// ledgerCandidates is the pod's candidates (up to k, best first by policy)
// and their slices among all, by the ledger: the nodes it ranks first
// (up to ledgerHint) read exactly, in order, until k have the share and
// ledgerSpare more were read, into into (an empty state the
// DynamicResources plugin holds) and ranked by that read. ok is false where
// the ledger cannot stand for the tracker's state (consumable capacity
// off, no pool index or change numbers, a slice of no node, a node that
// cannot be read alone, or none of ledgerHint nodes with the share): the
// caller gathers the whole state. With ok and no names no node has the
// share free (every node the ledger counts with it free was read, and has
// not).
func (e *draEnv) ledgerCandidates(pod *corev1.Pod, nis []fwk.NodeInfo, all []*resourceapi.ResourceSlice, into *structured.AllocatedState,
	busy map[string]bool, need claimNeed, policy api.Placement, k int) (names []string, sl []*resourceapi.ResourceSlice, ok bool) {
	if !e.features.ConsumableCapacity || e.byPool == nil || e.changes == nil {
		return nil, nil, false
	}
	t := &e.table
	t.mu.Lock()
	defer t.mu.Unlock()
	stamp, noNode := t.list(all, into, busy) // (into is empty: the busy GPUs' slices alone read device by device)
	if len(noNode) > 0 || !t.markLedger(e, stamp, need) {
		return nil, nil, false
	}
	match := newNodeMatch(pod, nis)
	hint := newTopFits(policy, ledgerHint)
	t.rank(hint, match, stamp, t.ledgerState, busy, need)
	top, nodes := newTopFits(policy, k), nodeLookup{nis: nis}
	for i, name := range hint.names() {
		if len(top.top) == k && i >= k+ledgerSpare {
			break
		}
		ni := nodes.get(name)
		if ni == nil || !e.nodeState(ni, t.poolsOf(all, stamp, name), into) {
			return nil, nil, false
		}
		for _, id := range t.byNode[name] {
			if en := t.entries[id]; t.seen[id] == stamp && len(en.devs) > 0 {
				if f, found := bestFit(en.devs, into, busy, need, policy); found {
					top.add(f)
				}
			}
		}
	}
	if names = top.names(); len(names) == 0 && len(hint.top) == ledgerHint {
		return nil, nil, false // (nodes past the hint's may have it free)
	}
	if len(names) > 0 {
		sl = t.slicesOf(all, stamp, names, noNode)
	}
	return names, sl, true
}

// ledgerState is the ledger's state of en's pool (t.mu held).
func (t *devTable) ledgerState(en *sliceEntry) *structured.AllocatedState {
	if lp := en.ledger; lp != nil && lp.st != nil {
		return lp.st
	}
	return t.none
}

// poolsOf are the pools of the node's slices listed in the cycle of stamp
// (every driver's; t.mu held).
func (t *devTable) poolsOf(all []*resourceapi.ResourceSlice, stamp uint64, node string) poolSet {
	var pools poolSet
	for _, id := range t.byNode[node] {
		if t.seen[id] != stamp {
			continue
		}
		pools = pools.with(all[t.idx[id]])
	}
	return pools
}

// markLedger brings the ledger's entries of the pools listed in the cycle
// of stamp up to date (t.mu held) and marks the slices of each pool it
// holds something of: to be read device by device (touched) where one of
// its devices may have need free, else read as full (used, not touched:
// ranked neither by device nor by shape). false: a pool could not be read.
func (t *devTable) markLedger(e *draEnv, stamp uint64, need claimNeed) bool {
	if t.ledger == nil || len(t.ledgerOf) != len(t.byPool) {
		t.indexLedger()
	}
	now, all := e.changes.changedSince(t.ledgerSeq, func(key string) {
		if lp := t.ledger[key]; lp != nil {
			lp.read = false
		}
	})
	t.ledgerSeq = now
	for _, lp := range t.ledgerOf {
		ids := t.byPool[lp.id]
		if !slices.ContainsFunc(ids, func(id int32) bool { return t.seen[id] == stamp }) {
			continue
		}
		if all || !lp.read || lp.nslices != len(ids) {
			if !t.readPool(e, lp, ids, stamp) {
				return false
			}
		}
		if lp.st == nil {
			continue // (every device free: ranked by its shape)
		}
		fits := lp.units >= need.units && lp.mem >= need.bytes
		for _, id := range ids {
			if t.seen[id] == stamp && t.used[id] != stamp {
				t.used[id] = stamp
				if fits {
					t.touched = append(t.touched, id)
				}
			}
		}
	}
	return true
}

// indexLedger gives each pool of the table its ledger entry, kept (t.mu
// held): by key, and listed in ledgerOf.
func (t *devTable) indexLedger() {
	if t.ledger == nil {
		t.ledger, t.none = map[string]*ledgerPool{}, emptyState()
	}
	t.ledgerOf = t.ledgerOf[:0]
	for pool := range t.byPool {
		key := poolKey(pool.Driver.String(), pool.Pool.String())
		lp := t.ledger[key]
		if lp == nil {
			lp = &ledgerPool{id: pool, pool: poolID{pool.Driver.String(), pool.Pool.String()}, key: key}
			t.ledger[key] = lp
		}
		t.ledgerOf = append(t.ledgerOf, lp)
	}
}

// readPool reads lp's pool (its slices' entries ids, those listed in the
// cycle of stamp): what the claims the pool index puts there hold, each as
// the tracker has it, and the most free on one of its devices.
func (t *devTable) readPool(e *draEnv, lp *ledgerPool, ids []int32, stamp uint64) bool {
	objs, err := e.byPool.ByIndex(claimPoolIndex, lp.key)
	if err != nil {
		return false
	}
	st, tracker, pools := emptyState(), e.dra.ResourceClaims(), poolSet{lp.pool}
	for _, o := range objs {
		if c, ok := o.(*resourceapi.ResourceClaim); ok {
			if tc, err := tracker.Get(c.Namespace, c.Name); err == nil && tc.UID == c.UID {
				addAllocation(st, tc.Status.Allocation, pools)
			}
		}
	}
	lp.read, lp.nslices, lp.st, lp.units, lp.mem = true, len(ids), nil, 0, 0
	for _, id := range ids {
		t.entries[id].ledger = lp
	}
	if len(st.AllocatedDevices) == 0 && len(st.AggregatedCapacity) == 0 && len(st.AllocatedSharedDeviceIDs) == 0 {
		return true
	}
	lp.st = st
	for _, id := range ids {
		if t.seen[id] != stamp {
			continue
		}
		for _, d := range t.entries[id].devs {
			u, m := consumed(st, d)
			lp.units, lp.mem = max(lp.units, d.units-u), max(lp.mem, d.mem-m)
		}
	}
	return true
}
