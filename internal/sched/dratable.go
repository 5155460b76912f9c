package sched

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/dra"
	"github.com/gpuslice/gpuslice/internal/dra/devices"
)

// sharedDev is one device of gpuslice.io's shape (consumable units and
// memory) as its ResourceSlice publishes it.
type sharedDev struct {
	id          structured.DeviceID
	units, mem  int64
	unavailable bool // tainted
	// uuid: the GPU's (attribute uuid, as its GPUNode row names it); pos:
	// the device's place in its slice; node: the slice's node ("" none).
	uuid, node string
	pos        int
}

// sliceEntry is the table's entry of one ResourceSlice object: its shared
// devices, its node ("" none), its number (the index of the table's
// per-cycle arrays) and the group of slices of its devices' capacities.
type sliceEntry struct {
	id    int32
	devs  []sharedDev
	node  string
	shape *shapeGroup // nil: no shared device
	// ledger: its pool's entry in the ledger (draledger.go; nil: not read).
	ledger *ledgerPool
}

// shapeGroup is the slices whose shared devices have, in order, the same
// units, memory and taint: with nothing allocated on them, the same best
// fit for a share (the first slice's), so the nodes among them rank by
// name alone.
type shapeGroup struct {
	first  *sliceEntry
	ids    []int32 // the slices, by node name when sorted
	sorted bool
}

// devTable keeps each ResourceSlice's shared devices, read once per slice
// object (the informer replaces the object when the slice changes), so a
// cycle does not re-read every device's capacities; and an index of the
// entries by pool, node, GPU and shape, so that a cycle's candidates read
// device by device only the slices the allocated state holds something of
// (or with a busy GPU), and rank the others by their shape's fit without
// reading them. Entries of replaced slices stay until the table is
// dropped: a cycle's stamps (seen) tell the slices it listed.
type devTable struct {
	mu      sync.Mutex
	bySlice map[*resourceapi.ResourceSlice]*sliceEntry
	entries []*sliceEntry // by id
	// seen: the stamp of the last list walked with the slice in it, at
	// index idx; used: the stamp of the last cycle that reads the slice
	// device by device.
	seen, used []uint64
	idx        []int32
	byPool     map[structured.DeviceID][]int32 // (poolOnly)
	byNode     map[string][]int32
	byUUID     map[string][]int32
	shapes     map[string]*shapeGroup
	stamp      uint64
	touched    []int32 // the cycle's slices read device by device (kept: no list per cycle)
	// ledger: per pool (poolKey), what its claims hold (draledger.go),
	// listed in ledgerOf, brought up to the change numbered ledgerSeq;
	// none: an empty state.
	ledger    map[string]*ledgerPool
	ledgerOf  []*ledgerPool
	ledgerSeq uint64
	none      *structured.AllocatedState
}

// devices returns the shared devices of each slice of all, in order.
func (t *devTable) devices(all []*resourceapi.ResourceSlice) [][]sharedDev {
	return t.devicesOf(all, len(all))
}

// devicesOf is devices for some of the slices of a list of listed: the
// table keeps the others' entries (those of replaced slices go once they
// are as many as the listed ones; listed 0: not known, none go).
func (t *devTable) devicesOf(some []*resourceapi.ResourceSlice, listed int) [][]sharedDev {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reset(listed)
	out := make([][]sharedDev, len(some))
	for i, s := range some {
		out[i] = t.of(s).devs
	}
	return out
}

// reset drops the table when it holds many more entries than listed
// slices (replaced ones; listed 0: not known, kept); t.mu held.
func (t *devTable) reset(listed int) {
	if t.bySlice == nil || listed > 0 && len(t.bySlice) > 2*listed+16 {
		t.bySlice = make(map[*resourceapi.ResourceSlice]*sliceEntry, listed)
		t.entries, t.seen, t.used, t.idx = nil, nil, nil, nil
		t.byPool, t.byNode, t.byUUID = map[structured.DeviceID][]int32{}, map[string][]int32{}, map[string][]int32{}
		t.shapes = map[string]*shapeGroup{}
		t.ledger, t.ledgerOf, t.ledgerSeq = nil, nil, 0
	}
}

// of is the entry of slice s, read once per slice object; t.mu held.
func (t *devTable) of(s *resourceapi.ResourceSlice) *sliceEntry {
	if e, ok := t.bySlice[s]; ok {
		return e
	}
	e := &sliceEntry{id: int32(len(t.entries)), node: ptr.Deref(s.Spec.NodeName, "")}
	var key []byte
	for p, d := range s.Spec.Devices {
		u, m := deviceCap(d, capUnits), deviceCap(d, capMemory)
		if s.Spec.Driver == dra.DriverName && u > 0 && m > 0 { // other drivers' devices are as published
			e.devs = append(e.devs, sharedDev{id: structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name), units: u, mem: m,
				unavailable: len(d.Taints) > 0, uuid: ptr.Deref(d.Attributes[devices.AttrUUID].StringValue, ""), pos: p,
				node: e.node})
			key = fmt.Appendf(key, "%d/%d/%t;", u, m, len(d.Taints) > 0)
		}
	}
	t.bySlice[s] = e
	t.entries = append(t.entries, e)
	t.seen, t.used, t.idx = append(t.seen, 0), append(t.used, 0), append(t.idx, 0)
	if e.node != "" {
		t.byNode[e.node] = append(t.byNode[e.node], e.id)
	}
	if len(e.devs) == 0 {
		return e
	}
	pool := poolOnly(e.devs[0].id)
	t.byPool[pool] = append(t.byPool[pool], e.id)
	for _, d := range e.devs {
		if d.uuid != "" {
			t.byUUID[d.uuid] = append(t.byUUID[d.uuid], e.id)
		}
	}
	g := t.shapes[string(key)]
	if g == nil {
		g = &shapeGroup{first: e}
		t.shapes[string(key)] = g
	}
	g.ids, g.sorted, e.shape = append(g.ids, e.id), false, g
	return e
}

// list starts a cycle on all (every slice listed; t.mu held): it stamps
// each slice's entry seen at its index, marks for a walk device by device
// (touched) the slices of the pools st holds a device of and those with a
// GPU in busy (every device of any other slice is free and counted), and
// returns the cycle's stamp and the indexes of the slices of no node.
func (t *devTable) list(all []*resourceapi.ResourceSlice, st *structured.AllocatedState, busy map[string]bool) (stamp uint64, noNode []int) {
	t.reset(len(all))
	t.stamp++
	stamp = t.stamp
	for i, s := range all {
		e := t.of(s)
		t.seen[e.id], t.idx[e.id] = stamp, int32(i)
		if e.node == "" {
			noNode = append(noNode, i)
		}
	}
	t.touched = t.touched[:0]
	mark := func(ids []int32) {
		for _, id := range ids {
			if t.used[id] != stamp && t.seen[id] == stamp {
				t.used[id] = stamp
				t.touched = append(t.touched, id)
			}
		}
	}
	for id := range st.AggregatedCapacity {
		mark(t.byPool[poolOnly(id)])
	}
	for id := range st.AllocatedDevices {
		mark(t.byPool[poolOnly(id)])
	}
	for uuid := range busy {
		mark(t.byUUID[uuid])
	}
	return stamp, noNode
}

// untouched calls fn with each slice of group g listed in the cycle of
// stamp and not read device by device, by node name, until fn returns
// false; t.mu held.
func (t *devTable) untouched(g *shapeGroup, stamp uint64, fn func(e *sliceEntry) bool) {
	if !g.sorted {
		slices.SortFunc(g.ids, func(a, b int32) int { return strings.Compare(t.entries[a].node, t.entries[b].node) })
		g.sorted = true
	}
	for _, id := range g.ids {
		if t.seen[id] == stamp && t.used[id] != stamp && !fn(t.entries[id]) {
			return
		}
	}
}

// slicesOf are the slices of all (listed in the cycle of stamp, t.mu
// held) of the nodes named and those of no node (noNode: their indexes),
// in all's order: what onlyOf returns, from the index.
func (t *devTable) slicesOf(all []*resourceapi.ResourceSlice, stamp uint64, names []string, noNode []int) []*resourceapi.ResourceSlice {
	idx := slices.Clone(noNode)
	for _, n := range names {
		for _, id := range t.byNode[n] {
			if t.seen[id] == stamp {
				idx = append(idx, int(t.idx[id]))
			}
		}
	}
	slices.Sort(idx)
	out := make([]*resourceapi.ResourceSlice, len(idx))
	for j, i := range idx {
		out[j] = all[i]
	}
	return out
}

// fitOf is device d's fit for need with u units and m bytes of it
// consumed (ok false: it has not the share free, or is tainted).
func fitOf(d *sharedDev, u, m int64, need claimNeed) (nodeFit, bool) {
	if d.unavailable || d.units-u < need.units || d.mem-m < need.bytes {
		return nodeFit{}, false
	}
	return nodeFit{node: d.node, left: float64(d.units-u-need.units)/float64(d.units) + float64(d.mem-m-need.bytes)/float64(d.mem)}, true
}
