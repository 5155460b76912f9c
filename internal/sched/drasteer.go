package sched

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/structured"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// Device-level placement for pods with ResourceClaims. On a node, the stock
// allocator (kube-scheduler's DynamicResources plugin) gives a request the
// first device that fits, in the order of the node's ResourceSlice.
// DRAName is that same plugin, kube-scheduler's code unchanged, handed a
// view of the ResourceSlices in which, for the pod being scheduled, the
// devices of gpuslice.io's shape (consumable units and memory) come in the
// order of the pod's placement policy (alloc.DeviceBefore, as GPU pods'
// GPUs: binpack the fullest first, spread the emptiest) and the GPUs
// measured above the utilization threshold are left out (for a pod whose
// claims are all plain shares, hidesBusy; on its nominated node they are
// shown: its victims' work was part of what was measured). So the first
// device that fits is the policy's choice, and the allocation the plugin
// writes to the claim's status is the standard one (driver, pool, device,
// shareID, consumedCapacity): the kubelet, Kueue and other schedulers read
// it as any other. Pools, slices, other devices and other drivers are as
// published.

// DRAName is the wrapped DynamicResources plugin's name in a profile (in
// place of DynamicResources; docs/scheduling.md).
const DRAName = "GPUSliceDynamicResources"

// Steering links, per profile, the GPUSlice plugin (its books: policy and
// utilization) with the wrapped DynamicResources plugin; made once per
// process and given to both factories.
type Steering struct {
	mu       sync.Mutex
	profiles map[string]*steer
}

// NewSteering returns an empty link.
func NewSteering() *Steering { return &Steering{profiles: map[string]*steer{}} }

// of is the profile's steer, made on first use (the factories run in any order).
func (s *Steering) of(profile string) *steer {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.profiles[profile]
	if st == nil {
		st = &steer{}
		s.profiles[profile] = st
	}
	return st
}

// steer is one profile's device view.
type steer struct {
	// books: the GPUSlice plugin's (nil: no GPUSlice in the profile, the
	// slices are shown as published).
	books atomic.Pointer[Books]
	// plugin: the GPUSlice plugin, whose candidate nodes for the pod are
	// computed in the view (nil: none).
	plugin atomic.Pointer[Plugin]
	table  devTable
	// cur: the pod in the wrapped plugin's PreFilter (the scheduling
	// cycle is serial), nil outside it.
	cur atomic.Pointer[steerCycle]
}

// changes is the GPUSlice plugin's record of claim allocation changes (nil:
// none, or no GPUSlice plugin).
func (s *steer) changes() *claimChanges {
	if p := s.plugin.Load(); p != nil && p.preempt != nil && p.preempt.dra != nil {
		return p.preempt.dra.changes
	}
	return nil
}

// metrics are the GPUSlice plugin's (nil: none).
func (s *steer) metrics() *pluginMetrics {
	if p := s.plugin.Load(); p != nil {
		return p.metrics
	}
	return nil
}

// steerCycle is what the view needs of one pod: its policy, the busy GPUs'
// UUIDs, and the allocated state the allocator starts from (as the plugin
// gathered it).
type steerCycle struct {
	policy api.Placement
	busy   map[string]bool
	state  atomic.Pointer[structured.AllocatedState]
	// seq: the claim changes numbered before state was gathered.
	seq atomic.Uint64
	// narrow: the pod's candidate nodes are computed from the gathered
	// state (nil: none); cands their outcome, set by the view.
	narrow *narrowing
	cands  atomic.Pointer[candidates]
	// lazy: state is read for the pod's candidate nodes alone, where they
	// can be told without the whole state (dranominee.go; nil: gathered
	// whole).
	lazy *lazyRead
}

// narrowing is what the candidates of a pod whose claims are shares need
// (GPUSlice's narrowDRA, dracandidates.go).
type narrowing struct {
	env   *draEnv
	pod   *corev1.Pod
	nodes []fwk.NodeInfo
	need  claimNeed
	k     int
	// refused: with no candidate GPUSlice's PreFilter refuses the pod (one
	// claim of one request), so no allocator runs on the view.
	refused bool
}

// candidates: the candidate nodes computed in the view; when there are
// some, the allocator was shown only their slices (and slices of no node).
type candidates struct {
	names []string
	err   error
	// slices: the candidates' slices and those of no node, as listed in
	// the cycle (informer objects, read-only); nil with no candidates.
	slices []*resourceapi.ResourceSlice
}

// steerKey: the allocated state the wrapped plugin gathered in PreFilter,
// read by GPUSlice's PreFilter (its candidates) instead of gathering it again.
const steerKey fwk.StateKey = Name + "/allocated"

type steerData struct {
	state *structured.AllocatedState
	// partial: state holds the pools of the one candidate node alone
	// (dranominee.go): not a state for other nodes.
	partial bool
	seq     uint64 // claimChanges.now() before state was gathered
	busy    map[string]bool
	cands   *candidates // nil: not computed
}

// Clone implements fwk.StateData: read-only.
func (d *steerData) Clone() fwk.StateData { return d }

// DRAFactory builds DRAName: kube-scheduler's DynamicResources plugin whose
// handle shows the ResourceSlices through the profile's device view.
func DRAFactory(s *Steering) func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return func(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
		args, err := draArgs(obj)
		if err != nil {
			return nil, err
		}
		st := s.of(fh.ProfileName())
		h := fh
		if m := fh.SharedDRAManager(); m != nil && st != nil {
			h = steeredHandle{Handle: fh, dra: steeredManager{SharedDRAManager: m, s: st}}
		}
		p, err := dynamicresources.New(ctx, args, h, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", DRAName, err)
		}
		inner, ok := p.(*dynamicresources.DynamicResources)
		if !ok {
			return nil, fmt.Errorf("%s: unexpected plugin %T", DRAName, p)
		}
		return &steeredDRA{DynamicResources: inner, s: st}, nil
	}
}

// draArgs are the DynamicResourcesArgs given under DRAName, or else their defaults.
func draArgs(obj runtime.Object) (*config.DynamicResourcesArgs, error) {
	if a, ok := obj.(*config.DynamicResourcesArgs); ok {
		return a, nil
	}
	if obj != nil {
		return nil, fmt.Errorf("%s: args of type %T, want DynamicResourcesArgs", DRAName, obj)
	}
	v := &configv1.DynamicResourcesArgs{}
	scheme.Scheme.Default(v)
	var out config.DynamicResourcesArgs
	if err := scheme.Scheme.Convert(v, &out, nil); err != nil {
		return nil, fmt.Errorf("%s: default args: %w", DRAName, err)
	}
	return &out, nil
}

// steeredDRA is DynamicResources with the view set up around its PreFilter
// (where it lists the slices and builds its allocator); every other method
// is the stock plugin's, under its own name.
type steeredDRA struct {
	*dynamicresources.DynamicResources
	s *steer
}

// Name is DRAName: the framework finds the plugin's weight and queueing
// hints under the name it was configured by.
func (p *steeredDRA) Name() string { return DRAName }

// isDRAPlugin tells whether a status comes from the DynamicResources
// plugin, stock or wrapped.
func isDRAPlugin(name string) bool { return name == names.DynamicResources || name == DRAName }

// PreFilter runs the stock PreFilter with the pod's view in place.
func (p *steeredDRA) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	b := p.s.books.Load()
	if b == nil {
		return p.DynamicResources.PreFilter(ctx, state, pod, nodes)
	}
	c := p.s.cycle(state, b, pod, nodes)
	p.s.cur.Store(c)
	r, st := p.DynamicResources.PreFilter(ctx, state, pod, nodes)
	p.s.cur.CompareAndSwap(c, nil)
	if as, lz := c.state.Load(), c.lazy; as != nil && (lz == nil || lz.st != as || lz.partial) {
		// (an empty state the view never filled is no state)
		state.Write(steerKey, &steerData{state: as, partial: lz != nil && lz.partial, seq: c.seq.Load(), busy: c.busy, cands: c.cands.Load()})
	}
	return r, st
}

// cycle is what the view needs of pod in its PreFilter: its policy, the
// busy GPUs it is not shown (none when a claim may need one, hidesBusy;
// not those its victims freed, busyFor) and what
// its candidate nodes are computed from (nothing when GPUSlice's PreFilter
// ran first, a profile listing it before DRAName: it chose its candidates
// already, without the view's).
func (s *steer) cycle(state fwk.CycleState, b *Books, pod *corev1.Pod, nodes []fwk.NodeInfo) *steerCycle {
	c := &steerCycle{policy: b.cfg.DefaultPlacement}
	pl := s.plugin.Load()
	if pl.hidesBusy(pod) {
		c.busy = pl.busyFor(b, pod) // drapreempt.go
	}
	if req, err := api.ParseRequest(pod); err == nil {
		c.policy = b.Policy(req)
		if _, ran := readCycle(state); pl != nil && req.Empty() && !ran {
			if c.narrow = pl.narrowingFor(pod, nodes); c.narrow != nil {
				c.lazy = lazyOf(pod)
			}
		}
	}
	return c
}

type steeredHandle struct {
	fwk.Handle
	dra fwk.SharedDRAManager
}

func (h steeredHandle) SharedDRAManager() fwk.SharedDRAManager { return h.dra }

type steeredManager struct {
	fwk.SharedDRAManager
	s *steer
}

func (m steeredManager) ResourceSlices() fwk.ResourceSliceLister {
	return steeredSlices{ResourceSliceLister: m.SharedDRAManager.ResourceSlices(), s: m.s}
}

func (m steeredManager) ResourceClaims() fwk.ResourceClaimTracker {
	return steeredClaims{ResourceClaimTracker: m.SharedDRAManager.ResourceClaims(), s: m.s}
}

// steeredClaims records the allocated state the plugin gathers for the pod.
type steeredClaims struct {
	fwk.ResourceClaimTracker
	s *steer
}

func (t steeredClaims) GatherAllocatedState() (*structured.AllocatedState, error) {
	if c := t.s.cur.Load(); c != nil && c.lazy != nil && c.lazy.st == nil && c.state.Load() == nil {
		st := emptyState() // (filled by the view: steer.candidates)
		c.lazy.st = st
		c.state.Store(st)
		return st, nil
	}
	seq := t.s.changes().now()
	st, err := t.ResourceClaimTracker.GatherAllocatedState()
	if err == nil {
		t.s.metrics().stateRead(stateGathered)
	}
	if c := t.s.cur.Load(); err == nil && c != nil {
		c.seq.Store(seq)
		c.state.Store(st)
	}
	return st, err
}

// steeredSlices lists the slices through the view during a pod's PreFilter.
type steeredSlices struct {
	fwk.ResourceSliceLister
	s *steer
}

func (l steeredSlices) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) {
	all, err := l.ResourceSliceLister.ListWithDeviceTaintRules()
	c := l.s.cur.Load()
	if err != nil || c == nil {
		return all, err
	}
	st := c.state.Load()
	if st == nil {
		return all, nil
	}
	listed, narrowed := len(all), false
	if n := c.narrow; n != nil {
		names, sl, none, err := l.s.candidates(c, n, all, st)
		if err != nil {
			return nil, err
		}
		if none {
			c.cands.Store(&candidates{})
			return nil, nil // (refused, with no state beyond the ledger's: the allocator is shown no slice)
		}
		cs := &candidates{names: names}
		if narrowed = len(names) > 0; narrowed {
			cs.slices = sl // (onlyOf(all, names), from the table's index)
			all = cs.slices
		}
		c.cands.Store(cs)
		if len(names) == 0 && n.refused {
			return all, nil // (ordering every slice would be for nothing: a preemptor's first try in a full cluster)
		}
	}
	if !narrowed && c.policy == api.PlacementFirstFit && len(c.busy) == 0 {
		return all, nil
	}
	return l.s.view(all, c, st, listed), nil
}

// view is all with, in each slice whose devices the policy orders otherwise
// than published (some in use) or that has a busy GPU, a copy of the slice
// with its shared devices in policy order and the busy ones left out; the
// other slices are the informer's own (read-only) objects. all may be the
// pod's candidates' slices alone, of listed slices (candidatesIn: the allocator,
// which sorts every slice by node when it is made, runs on them alone).
func (s *steer) view(all []*resourceapi.ResourceSlice, c *steerCycle, st *structured.AllocatedState, listed int) []*resourceapi.ResourceSlice {
	// A slice none of whose devices the state holds (every device free) is
	// in policy order as published. For a few slices (the candidates')
	// their devices are looked up; for many the state's pools are listed
	// once (a slice of no pool listed holds nothing).
	var used map[structured.DeviceID]bool
	few := len(all) <= draCandidateNodes+4
	if c.policy != api.PlacementFirstFit && !few {
		used = usedPools(st)
	}
	var out []*resourceapi.ResourceSlice
	for i, devs := range s.table.devicesOf(all, listed) {
		if len(devs) == 0 {
			continue
		}
		inUse := c.policy != api.PlacementFirstFit && (few && anyHeld(st, devs) || used[poolOnly(devs[0].id)])
		if !inUse && !anyBusy(devs, c.busy) {
			continue
		}
		if sl := steerSlice(all[i], devs, c, st); sl != all[i] {
			if out == nil {
				out = slices.Clone(all)
			}
			out[i] = sl
		}
	}
	if out == nil {
		return all
	}
	return out
}

// usedPools are the pools (poolOnly) with a device the state holds part
// or all of: a device of any other pool is free.
func usedPools(st *structured.AllocatedState) map[structured.DeviceID]bool {
	used := make(map[structured.DeviceID]bool, len(st.AggregatedCapacity)+len(st.AllocatedDevices))
	for id := range st.AggregatedCapacity {
		used[poolOnly(id)] = true
	}
	for id := range st.AllocatedDevices {
		used[poolOnly(id)] = true
	}
	return used
}

// poolOnly is id without its device: its driver and pool.
func poolOnly(id structured.DeviceID) structured.DeviceID {
	var none structured.DeviceID
	id.Device = none.Device
	return id
}

// anyHeld reports whether st holds part or all of a device of devs.
func anyHeld(st *structured.AllocatedState, devs []sharedDev) bool {
	for _, d := range devs {
		if st.AllocatedDevices.Has(d.id) {
			return true
		}
		if _, ok := st.AggregatedCapacity[d.id]; ok {
			return true
		}
	}
	return false
}

func anyBusy(devs []sharedDev, busy map[string]bool) bool {
	for _, d := range devs {
		if busy[d.uuid] {
			return true
		}
	}
	return false
}

// steerSlice is sl with its shared devices devs (in slice order) in policy
// order and the busy ones left out; sl itself when that changes nothing.
func steerSlice(sl *resourceapi.ResourceSlice, devs []sharedDev, c *steerCycle, st *structured.AllocatedState) *resourceapi.ResourceSlice {
	type ranked struct {
		d    sharedDev
		free float64
	}
	keep := make([]ranked, 0, len(devs))
	for _, d := range devs {
		if c.busy[d.uuid] {
			continue
		}
		u, m := consumed(st, d)
		keep = append(keep, ranked{d: d, free: float64(d.units-u)/float64(d.units) + float64(d.mem-m)/float64(d.mem)})
	}
	sort.SliceStable(keep, func(i, j int) bool {
		return alloc.DeviceBefore(c.policy, keep[i].free, keep[j].free, keep[i].d.pos, keep[j].d.pos)
	})
	same := len(keep) == len(devs)
	for i := 0; same && i < len(keep); i++ {
		same = keep[i].d.pos == devs[i].pos
	}
	if same {
		return sl
	}
	// The shared devices' places take the kept ones in order; the rest stay.
	n := *sl
	n.Spec.Devices = make([]resourceapi.Device, 0, len(sl.Spec.Devices))
	next, k := 0, 0 // next shared place in devs, next kept device
	for p, d := range sl.Spec.Devices {
		if next < len(devs) && devs[next].pos == p {
			next++
			if k < len(keep) {
				n.Spec.Devices = append(n.Spec.Devices, sl.Spec.Devices[keep[k].d.pos])
				k++
			}
			continue
		}
		n.Spec.Devices = append(n.Spec.Devices, d)
	}
	return &n
}
