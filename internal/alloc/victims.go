package alloc

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"time"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// Victim is a booked pod preemption may evict, with its priority.
type Victim struct {
	UID      string
	Priority int32
}

// exactVictims bounds the holders of one GPU searched exhaustively for the
// fewest victims (2^n subsets); above it, a greedy choice is made.
const exactVictims = 12

// ErrNoVictims says that evicting every allowed pod would still not make
// room.
var ErrNoVictims = errors.New("evicting every lower-priority pod it may evict would not free enough")

// Victims chooses the fewest of cands (pods preemption may evict, least
// important first) whose eviction makes req fit on node as o leaves it: for
// a share of one GPU, the cheapest set on any one GPU (fewest pods, then the
// lowest highest priority, then the lowest sum of priorities); for larger
// requests, the cheapest GPUs one after another until req fits. It returns
// nothing when req fits already, and ErrNoVictims (wrapped with the reason)
// when evicting all of cands would not do. Pods in cands the books do not
// hold on node are never chosen.
func (b *Books) Victims(node string, req *api.PodRequest, now time.Time, o *Overlay, cands []Victim) ([]string, error) {
	base := o.Clone()
	if base == nil {
		base = &Overlay{}
	}
	if b.CheckWith(node, req, now, base) == nil {
		return nil, nil
	}
	var mine []Victim
	for _, v := range cands {
		if a := b.pods[v.UID]; a != nil && a.Node == node && !slices.Contains(base.Removed, v.UID) {
			mine = append(mine, v)
		}
	}
	all := base.Clone()
	for _, v := range mine {
		all.Removed = append(all.Removed, v.UID)
	}
	if err := b.CheckWith(node, req, now, all); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoVictims, err)
	}
	need := largestShare(req)
	ns := b.nodes[node]
	var chosen []string
	var targeted []int32
	for {
		cur := base.Clone()
		cur.Removed = append(cur.Removed, chosen...)
		if b.CheckWith(node, req, now, cur) == nil {
			return chosen, nil
		}
		used, _ := b.without(node, ns, cur.Removed)
		var best *gpuVictims
		for i := range ns.table.GPUs {
			g := &ns.table.GPUs[i]
			if slices.Contains(targeted, g.Index) || !b.mayUse(g, req.Sharing) {
				continue
			}
			if s, ok := b.cheapestOn(g, &used, need, mine, chosen); ok && s.better(best) {
				best = &s
			}
		}
		if best == nil {
			// No single GPU settles it (several containers of several
			// sizes): all of them; the caller's reprieve pass keeps the
			// ones not needed.
			return uids(mine), nil
		}
		chosen = append(chosen, best.uids...)
		targeted = append(targeted, best.gpu)
	}
}

// mayUse reports whether a GPU could hold a share once pods leave it:
// healthy, of an accepted sharing mode, without unscheduled processes (unless
// allowed). Utilization is not asked: the leaving pods' work is in it.
func (b *Books) mayUse(g *GPU, sharing api.SharingMode) bool {
	return g.Healthy && g.Mode.Accepts(sharing) && (g.UnscheduledProcesses == 0 || b.cfg.AllowUnscheduledProcesses)
}

// shareNeed is what one GPU must have free for the largest share of a
// request.
type shareNeed struct {
	whole        bool
	units, bytes int64
}

func largestShare(req *api.PodRequest) shareNeed {
	var n shareNeed
	for _, c := range req.Containers {
		n.whole = n.whole || c.Whole
		n.units = max(n.units, c.Units)
		n.bytes = max(n.bytes, c.MemoryBytes)
	}
	return n
}

// gpuVictims is a set of pods whose eviction frees enough on one GPU.
type gpuVictims struct {
	gpu       int32
	uids      []string
	maxPrio   int32
	sumPrio   int64
	preferred int // sum of positions in cands: less important pods first
}

func (s gpuVictims) better(o *gpuVictims) bool {
	switch {
	case o == nil:
		return true
	case len(s.uids) != len(o.uids):
		return len(s.uids) < len(o.uids)
	case s.maxPrio != o.maxPrio:
		return s.maxPrio < o.maxPrio
	case s.sumPrio != o.sumPrio:
		return s.sumPrio < o.sumPrio
	default:
		return s.preferred < o.preferred
	}
}

// holder is one evictable pod's holding on one GPU.
type holder struct {
	pos          int // position in cands
	v            Victim
	units, bytes int64
	containers   int
	exclusive    bool
}

// cheapestOn finds the cheapest set of evictable pods (not yet chosen) whose
// eviction leaves g with need free, given the usage used.
func (b *Books) cheapestOn(g *GPU, used *usageSet, need shareNeed, cands []Victim, chosen []string) (gpuVictims, bool) {
	var u Usage
	if p := used.get(g.Index); p != nil {
		u = *p
	}
	var hs []holder
	for i, v := range cands {
		if slices.Contains(chosen, v.UID) {
			continue
		}
		if h, ok := holdingOn(b.pods[v.UID], g.Index); ok {
			h.pos, h.v = i, v
			hs = append(hs, h)
		}
	}
	if need.whole || u.ExclusivePods > 0 {
		// Everyone on the GPU must go (a whole-GPU holder is its only one).
		if len(hs) < u.Pods {
			return gpuVictims{}, false
		}
		return makeSet(g.Index, hs), true
	}
	du := need.units - (g.UnitsTotal - u.Units)
	dm := need.bytes - (g.MemoryBytes - u.MemoryBytes)
	dc := u.Containers + 1 - api.MaxContainersPerGPU
	if need.units > g.UnitsTotal || need.bytes > g.MemoryBytes {
		return gpuVictims{}, false
	}
	if du <= 0 && dm <= 0 && dc <= 0 {
		return gpuVictims{gpu: g.Index}, true
	}
	enough := func(set []holder) bool {
		var fu, fm int64
		var fc int
		for _, h := range set {
			fu, fm, fc = fu+h.units, fm+h.bytes, fc+h.containers
		}
		return fu >= du && fm >= dm && fc >= dc
	}
	if !enough(hs) {
		return gpuVictims{}, false
	}
	if len(hs) <= exactVictims {
		return fewestExact(g.Index, hs, enough), true
	}
	return fewestGreedy(g.Index, hs, du, dm, dc), true
}

// holdingOn sums an assignment's shares on one GPU.
func holdingOn(a *api.Assignment, idx int32) (holder, bool) {
	var h holder
	found := false
	if a == nil {
		return h, false
	}
	for _, c := range a.Containers {
		for _, g := range c.GPUs {
			if g.Index == idx {
				found = true
				h.units += g.Units
				h.bytes += g.MemoryBytes
				h.containers++
				h.exclusive = h.exclusive || g.Exclusive
			}
		}
	}
	return h, found
}

// fewestExact tries every subset, smallest first, and keeps the best of
// the smallest size that frees enough.
func fewestExact(gpu int32, hs []holder, enough func([]holder) bool) gpuVictims {
	n := len(hs)
	masks := make([]uint32, 0, 1<<n)
	for m := uint32(1); m < 1<<n; m++ {
		masks = append(masks, m)
	}
	sort.SliceStable(masks, func(i, j int) bool { return bits.OnesCount32(masks[i]) < bits.OnesCount32(masks[j]) })
	var best *gpuVictims
	size := 0
	set := make([]holder, 0, n)
	for _, m := range masks {
		k := bits.OnesCount32(m)
		if best != nil && k > size {
			break
		}
		set = set[:0]
		for i := 0; i < n; i++ {
			if m&(1<<i) != 0 {
				set = append(set, hs[i])
			}
		}
		if enough(set) {
			s := makeSet(gpu, set)
			if s.better(best) {
				best, size = &s, k
			}
		}
	}
	return *best
}

// fewestGreedy takes the pods freeing the most (relative to what is
// missing) first; exact for one dimension, close for several.
func fewestGreedy(gpu int32, hs []holder, du, dm int64, dc int) gpuVictims {
	weight := func(h holder) float64 {
		w := 0.0
		if du > 0 {
			w = max(w, float64(h.units)/float64(du))
		}
		if dm > 0 {
			w = max(w, float64(h.bytes)/float64(dm))
		}
		if dc > 0 {
			w = max(w, float64(h.containers)/float64(dc))
		}
		return w
	}
	sorted := slices.Clone(hs)
	sort.SliceStable(sorted, func(i, j int) bool { return weight(sorted[i]) > weight(sorted[j]) })
	var fu, fm int64
	var fc int
	var set []holder
	for _, h := range sorted {
		if fu >= du && fm >= dm && fc >= dc {
			break
		}
		set = append(set, h)
		fu, fm, fc = fu+h.units, fm+h.bytes, fc+h.containers
	}
	return makeSet(gpu, set)
}

func makeSet(gpu int32, set []holder) gpuVictims {
	s := gpuVictims{gpu: gpu, maxPrio: -1 << 31}
	for _, h := range set {
		s.uids = append(s.uids, h.v.UID)
		s.maxPrio = max(s.maxPrio, h.v.Priority)
		s.sumPrio += int64(h.v.Priority)
		s.preferred += h.pos
	}
	return s
}

func uids(vs []Victim) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.UID
	}
	return out
}
