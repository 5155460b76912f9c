package sched

import (
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/dra"
	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/pkg/api"
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
// devices and, for a cycle's candidates, where the slice is in the cycle's
// list and whether the allocated state holds any of its pool's devices.
type sliceEntry struct {
	devs []sharedDev
	node string // the slice's node ("" none)
	// seen: the stamp of the last list walked with the slice in it, at
	// index idx; used: the stamp of the last state holding a device of
	// its pool (else every device of it is free in that state).
	seen, used uint64
	idx        int
	// free: the best fit of the slice with every device free, for need
	// and policy (one burst of pods asks for the same share).
	free freeFit
}

// freeFit is a slice's best device for need by policy with nothing
// allocated: its free fraction after the share (found: some device fits).
type freeFit struct {
	valid  bool
	need   claimNeed
	policy api.Placement
	found  bool
	left   float64
}

// devTable keeps each ResourceSlice's shared devices, read once per slice
// object (the informer replaces the object when the slice changes), so a
// cycle does not re-read every device's capacities; and an index of the
// entries by pool and by node, so that a cycle finds the slices whose
// pools the state uses, and the candidates' slices, without a hash of
// every slice's devices or nodes.
type devTable struct {
	mu      sync.Mutex
	bySlice map[*resourceapi.ResourceSlice]*sliceEntry
	// byPool: the entries of each pool (poolOnly); byNode: of each node.
	// Entries of replaced slices stay until the table is dropped (their
	// stamps are not the cycle's).
	byPool map[structured.DeviceID][]*sliceEntry
	byNode map[string][]*sliceEntry
	stamp  uint64
	buf    []*sliceEntry // a walk's entries (kept: no list per cycle)
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
		t.byPool = make(map[structured.DeviceID][]*sliceEntry, listed)
		t.byNode = make(map[string][]*sliceEntry, listed)
	}
}

// of is the entry of slice s, read once per slice object; t.mu held.
func (t *devTable) of(s *resourceapi.ResourceSlice) *sliceEntry {
	if e, ok := t.bySlice[s]; ok {
		return e
	}
	e := &sliceEntry{node: ptr.Deref(s.Spec.NodeName, "")}
	for p, d := range s.Spec.Devices {
		u, m := deviceCap(d, capUnits), deviceCap(d, capMemory)
		if s.Spec.Driver == dra.DriverName && u > 0 && m > 0 { // other drivers' devices are as published
			e.devs = append(e.devs, sharedDev{id: structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name), units: u, mem: m,
				unavailable: len(d.Taints) > 0, uuid: ptr.Deref(d.Attributes[devices.AttrUUID].StringValue, ""), pos: p,
				node: e.node})
		}
	}
	t.bySlice[s] = e
	if len(e.devs) > 0 {
		pool := poolOnly(e.devs[0].id)
		t.byPool[pool] = append(t.byPool[pool], e)
	}
	if e.node != "" {
		t.byNode[e.node] = append(t.byNode[e.node], e)
	}
	return e
}

// walk is a cycle's walk of all (every slice listed) with t.mu held: it
// marks the entries of the pools st holds a device of (used == the stamp
// returned; a slice of any other pool has every device free), then calls
// fn with each slice's entry and index, in order, marking it seen.
func (t *devTable) walk(all []*resourceapi.ResourceSlice, st *structured.AllocatedState, fn func(i int, e *sliceEntry)) (stamp uint64) {
	t.reset(len(all))
	t.stamp++
	stamp = t.stamp
	t.buf = t.buf[:0]
	for _, s := range all { // (entries first: the marks reach slices new in this list too)
		t.buf = append(t.buf, t.of(s))
	}
	mark := func(id structured.DeviceID) {
		for _, e := range t.byPool[poolOnly(id)] {
			e.used = stamp
		}
	}
	for id := range st.AggregatedCapacity {
		mark(id)
	}
	for id := range st.AllocatedDevices {
		mark(id)
	}
	for i, e := range t.buf {
		e.seen, e.idx = stamp, i
		fn(i, e)
	}
	clear(t.buf) // (no entry kept alive past its slice)
	return stamp
}

// slicesOf are the slices of all (walked with stamp, t.mu held) of the
// nodes named and those of no node (noNode: their indexes), in all's
// order: what onlyOf returns, from the index.
func (t *devTable) slicesOf(all []*resourceapi.ResourceSlice, stamp uint64, names []string, noNode []int) []*resourceapi.ResourceSlice {
	idx := slices.Clone(noNode)
	for _, n := range names {
		for _, e := range t.byNode[n] {
			if e.seen == stamp {
				idx = append(idx, e.idx)
			}
		}
	}
	slices.Sort(idx)
	var out []*resourceapi.ResourceSlice
	for _, i := range idx {
		out = append(out, all[i])
	}
	return out
}

// freeBest is the entry's best device for need by policy with every
// device free (cached per need and policy).
func (e *sliceEntry) freeBest(need claimNeed, policy api.Placement) (left float64, found bool) {
	if f := e.free; f.valid && f.need == need && f.policy == policy {
		return f.left, f.found
	}
	best, found := nodeFit{node: e.node}, false
	for i := range e.devs {
		if f, ok := fitOf(&e.devs[i], 0, 0, need); ok && (!found || f.better(best, policy)) {
			best, found = f, true
		}
	}
	e.free = freeFit{valid: true, need: need, policy: policy, found: found, left: best.left}
	return best.left, found
}

// fitOf is device d's fit for need with u units and m bytes of it
// consumed (ok false: it has not the share free, or is tainted).
func fitOf(d *sharedDev, u, m int64, need claimNeed) (nodeFit, bool) {
	if d.unavailable || d.units-u < need.units || d.mem-m < need.bytes {
		return nodeFit{}, false
	}
	return nodeFit{node: d.node, left: float64(d.units-u-need.units)/float64(d.units) + float64(d.mem-m-need.bytes)/float64(d.mem)}, true
}
