// Package alloc is gpuslice's pure GPU allocator: it keeps the books of which
// pod holds how much of which GPU, filters GPUs by free capacity, health and
// measured utilization, chooses GPUs and scores nodes by placement policy.
// It does no I/O and reads no clock: callers pass the time and the data.
package alloc

import (
	"fmt"
	"sort"
	"time"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// GPU is one device as the resource table reports it.
type GPU struct {
	Index                int32
	UUID                 string
	UnitsTotal           int64
	MemoryBytes          int64
	Healthy              bool
	UtilizationPercent   int32
	UnscheduledProcesses int32
	// Mode is the GPU's sharing mode; in mps mode UnitsFree (measured by
	// the node from its live MPS clients) also bounds what a pod can get.
	Mode      api.SharingMode
	UnitsFree int64
}

// Node is one node's row of the resource table.
type Node struct {
	Name  string
	State v1alpha2.NodeState
	GPUs  []GPU
}

// Lease is a node agent's liveness: when it last renewed its Lease and for
// how long a renewal holds.
type Lease struct {
	Renewed  time.Time
	Duration time.Duration
}

// NodeFromAPI converts a GPUNode to the allocator's form.
func NodeFromAPI(n *v1alpha2.GPUNode) Node {
	out := Node{Name: n.Name, State: n.Status.State}
	for _, g := range n.Status.GPUs {
		out.GPUs = append(out.GPUs, GPU{
			Index: g.Index, UUID: g.UUID, UnitsTotal: g.UnitsTotal, MemoryBytes: g.Memory.Value(),
			Healthy: g.Health == v1alpha2.GPUHealthy, UtilizationPercent: g.UtilizationPercent,
			UnscheduledProcesses: g.UnscheduledProcesses, Mode: g.Mode(), UnitsFree: g.UnitsFree,
		})
	}
	sort.Slice(out.GPUs, func(i, j int) bool { return out.GPUs[i].Index < out.GPUs[j].Index })
	return out
}

// Usage is what pods hold of one GPU.
type Usage struct {
	Units       int64
	MemoryBytes int64
	// Pods counts the pods holding a share, ExclusivePods those holding
	// the whole GPU.
	Pods          int
	ExclusivePods int
	// Containers counts the containers holding the GPU (at most
	// api.MaxContainersPerGPU: the kubelet's slots).
	Containers int
}

type nodeState struct {
	table *Node  // nil: no table row (yet)
	lease *Lease // nil: no Lease (yet): the node is stale
	used  usageSet
	sum   summary // of table and used (summary.go)
}

// Books is the allocation state: the table rows and the holdings of pods,
// keyed by pod UID. Not safe for concurrent use; callers lock. Best and
// Chunks rebuild a lazily kept node index: they write, unlike Check, Score,
// Usage and Quality (BestIn reads the index Chunks built).
type Books struct {
	cfg    Config
	nodes  map[string]*nodeState
	pods   map[string]*api.Assignment
	names  []string     // sorted names of nodes with a row; nil: recompute
	states []*nodeState // their states, same order
}

// NewBooks returns empty books. cfg must be valid (see Config.Validate).
func NewBooks(cfg Config) *Books {
	return &Books{cfg: cfg, nodes: map[string]*nodeState{}, pods: map[string]*api.Assignment{}}
}

func (b *Books) node(name string) *nodeState {
	ns := b.nodes[name]
	if ns == nil {
		ns = &nodeState{}
		b.nodes[name] = ns
	}
	return ns
}

// SetNode records or replaces a node's table row.
func (b *Books) SetNode(n Node) {
	ns := b.node(n.Name)
	if ns.table == nil {
		b.names = nil
	}
	ns.table = &n
	b.summarize(ns)
}

// RemoveNode forgets a node's table row; holdings on it stay booked until
// their pods are released.
func (b *Books) RemoveNode(name string) {
	ns := b.nodes[name]
	if ns == nil {
		return
	}
	if ns.table != nil {
		b.names = nil
	}
	ns.table = nil
	b.forgetIfEmpty(name, ns)
}

// SetLease records or replaces a node agent's Lease.
func (b *Books) SetLease(name string, l Lease) { b.node(name).lease = &l }

// Live reports whether the node's agent holds an unexpired Lease at now.
func (b *Books) Live(name string, now time.Time) bool {
	ns := b.nodes[name]
	return ns != nil && b.leaseErr(ns, now) == nil
}

// RemoveLease forgets a node agent's Lease: the node is stale until one
// comes back.
func (b *Books) RemoveLease(name string) {
	if ns := b.nodes[name]; ns != nil {
		ns.lease = nil
		b.forgetIfEmpty(name, ns)
	}
}

func (b *Books) forgetIfEmpty(name string, ns *nodeState) {
	if ns.table == nil && ns.lease == nil && ns.used.len() == 0 {
		delete(b.nodes, name)
	}
}

// Holding returns the assignment booked for a pod, or nil.
func (b *Books) Holding(uid string) *api.Assignment { return b.pods[uid] }

// Add books an assignment that already exists in the cluster (a pod's
// annotation), whether or not it fits: the API server is the truth. Adding
// the same pod again replaces its previous holding.
func (b *Books) Add(uid string, a *api.Assignment) {
	b.Release(uid)
	ns := b.node(a.Node)
	ns.used.apply(a, 1)
	b.summarize(ns)
	b.pods[uid] = a
}

// Reserve books a new assignment only if it still fits the free capacity of
// its GPUs; a pod that holds something already is an error.
func (b *Books) Reserve(uid string, a *api.Assignment) error {
	if old := b.pods[uid]; old != nil {
		return fmt.Errorf("pod %s already holds GPUs on node %s", uid, old.Node)
	}
	ns := b.nodes[a.Node]
	if ns == nil || ns.table == nil {
		return fmt.Errorf("node %s has no GPUNode entry", a.Node)
	}
	holders := containersPerGPU(a)
	for idx, t := range a.Totals() {
		g := ns.table.gpu(idx)
		if g == nil {
			return fmt.Errorf("node %s has no GPU %d", a.Node, idx)
		}
		u := ns.usage(idx)
		if u.ExclusivePods > 0 || (t.Exclusive && u.Pods > 0) || u.Containers+holders[idx] > api.MaxContainersPerGPU ||
			u.Units+t.Units > g.UnitsTotal || u.MemoryBytes+t.MemoryBytes > g.MemoryBytes {
			return fmt.Errorf("node %s GPU %d: no longer has %d units and %d bytes free", a.Node, idx, t.Units, t.MemoryBytes)
		}
	}
	b.Add(uid, a)
	return nil
}

// Release returns a pod's holding; releasing an unknown pod does nothing.
func (b *Books) Release(uid string) {
	a := b.pods[uid]
	if a == nil {
		return
	}
	delete(b.pods, uid)
	ns := b.nodes[a.Node]
	ns.used.apply(a, -1)
	b.summarize(ns)
	if ns.table == nil && ns.used.len() == 0 {
		delete(b.nodes, a.Node)
	}
}

// Usage returns what pods hold of each GPU of a node, by index.
func (b *Books) Usage(node string) map[int32]Usage {
	out := map[int32]Usage{}
	if ns := b.nodes[node]; ns != nil {
		for _, e := range ns.used.e {
			out[e.idx] = *e.u
		}
	}
	return out
}

// Pods returns the number of pods holding GPUs.
func (b *Books) Pods() int { return len(b.pods) }

// Overcommitted lists "node/gpu" entries whose holdings exceed capacity or
// share an exclusive GPU (possible only through Add of outside assignments).
func (b *Books) Overcommitted() []string {
	var out []string
	for name, ns := range b.nodes {
		for _, e := range ns.used.e {
			idx, u := e.idx, e.u
			var g *GPU
			if ns.table != nil {
				g = ns.table.gpu(idx)
			}
			if g == nil || u.Units > g.UnitsTotal || u.MemoryBytes > g.MemoryBytes || (u.ExclusivePods > 0 && u.Pods > 1) || u.Containers > api.MaxContainersPerGPU {
				out = append(out, fmt.Sprintf("%s/%d", name, idx))
			}
		}
	}
	sort.Strings(out)
	return out
}

// containersPerGPU counts an assignment's containers on each GPU.
func containersPerGPU(a *api.Assignment) map[int32]int {
	out := map[int32]int{}
	for _, c := range a.Containers {
		for _, g := range c.GPUs {
			out[g.Index]++
		}
	}
	return out
}

func (n *Node) gpu(idx int32) *GPU {
	for i := range n.GPUs {
		if n.GPUs[i].Index == idx {
			return &n.GPUs[i]
		}
	}
	return nil
}

func (ns *nodeState) usage(idx int32) Usage {
	if u := ns.used.get(idx); u != nil {
		return *u
	}
	return Usage{}
}

// usageSet maps GPU index to usage; nodes have few GPUs, so a slice with
// linear search beats a map on the scheduler's hot path.
type usageSet struct{ e []usageEntry }

type usageEntry struct {
	idx int32
	u   *Usage
}

func (s *usageSet) len() int { return len(s.e) }

func (s *usageSet) get(idx int32) *Usage {
	for i := range s.e {
		if s.e[i].idx == idx {
			return s.e[i].u
		}
	}
	return nil
}

func (s *usageSet) add(idx int32) *Usage {
	if u := s.get(idx); u != nil {
		return u
	}
	u := &Usage{}
	s.e = append(s.e, usageEntry{idx: idx, u: u})
	return u
}

// apply adds (sign 1) or takes away (sign -1) an assignment's holdings;
// GPUs nobody holds any more leave the set.
func (s *usageSet) apply(a *api.Assignment, sign int) {
	for _, c := range a.Containers {
		for _, g := range c.GPUs {
			s.add(g.Index).Containers += sign
		}
	}
	for idx, t := range a.Totals() {
		u := s.add(idx)
		u.Units += int64(sign) * t.Units
		u.MemoryBytes += int64(sign) * t.MemoryBytes
		u.Pods += sign
		if t.Exclusive {
			u.ExclusivePods += sign
		}
		if u.Pods == 0 {
			s.del(idx)
		}
	}
}

// clone copies the set and its usages.
func (s *usageSet) clone() usageSet {
	out := usageSet{e: make([]usageEntry, len(s.e))}
	for i, e := range s.e {
		u := *e.u
		out.e[i] = usageEntry{idx: e.idx, u: &u}
	}
	return out
}

func (s *usageSet) del(idx int32) {
	for i := range s.e {
		if s.e[i].idx == idx {
			s.e = append(s.e[:i], s.e[i+1:]...)
			return
		}
	}
}

// CheckChange tells whether a booked pod's assignment may become to: on
// every GPU, what the others hold plus to's share fits the GPU. It changes
// nothing (the caller books with Add).
func (b *Books) CheckChange(uid string, to *api.Assignment) error {
	from := b.pods[uid]
	if from == nil || from.Node != to.Node {
		return fmt.Errorf("pod %s holds nothing on node %s", uid, to.Node)
	}
	ns := b.nodes[to.Node]
	if ns == nil || ns.table == nil {
		return fmt.Errorf("node %s has no GPUNode entry", to.Node)
	}
	had := from.Totals()
	for idx, t := range to.Totals() {
		g := ns.table.gpu(idx)
		if g == nil {
			return fmt.Errorf("node %s has no GPU %d", to.Node, idx)
		}
		u, h := ns.usage(idx), had[idx]
		freeUnits, freeMem := g.UnitsTotal-(u.Units-h.Units), g.MemoryBytes-(u.MemoryBytes-h.MemoryBytes)
		if t.Units > freeUnits {
			return fmt.Errorf("node %s GPU %d: %d units asked, %d free to this pod (others hold %d of %d)", to.Node, idx, t.Units, freeUnits, u.Units-h.Units, g.UnitsTotal)
		}
		if t.MemoryBytes > freeMem {
			return fmt.Errorf("node %s GPU %d: %d bytes of memory asked, %d free to this pod (others hold %d of %d)", to.Node, idx, t.MemoryBytes, freeMem, u.MemoryBytes-h.MemoryBytes, g.MemoryBytes)
		}
	}
	return nil
}
