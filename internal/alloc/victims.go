package alloc

import (
	"errors"
	"fmt"
	"slices"
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
			if s, ok := b.cheapestOn(g, &used, need, mine, chosen); ok && (best == nil || s.Better(&best.VictimSet)) {
				best = &s
			}
		}
		if best == nil {
			// No single GPU settles it (several containers of several
			// sizes): all of them; the caller's reprieve pass keeps the
			// ones not needed.
			return uids(mine), nil
		}
		chosen = append(chosen, best.UIDs...)
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
	gpu int32
	VictimSet
}

// cheapestOn finds the cheapest set of evictable pods (not yet chosen) whose
// eviction leaves g with need free, given the usage used.
func (b *Books) cheapestOn(g *GPU, used *usageSet, need shareNeed, cands []Victim, chosen []string) (gpuVictims, bool) {
	var u Usage
	if p := used.get(g.Index); p != nil {
		u = *p
	}
	var hs []DeviceHolder
	for i, v := range cands {
		if slices.Contains(chosen, v.UID) {
			continue
		}
		if h, ok := holdingOn(b.pods[v.UID], g.Index); ok {
			h.Victim, h.Pos = v, i
			hs = append(hs, h)
		}
	}
	if need.units > g.UnitsTotal || need.bytes > g.MemoryBytes {
		if !need.whole && u.ExclusivePods == 0 {
			return gpuVictims{}, false
		}
	}
	d := DeviceNeed{All: need.whole || u.ExclusivePods > 0, Holders: u.Pods,
		Units: need.units - (g.UnitsTotal - u.Units), Bytes: need.bytes - (g.MemoryBytes - u.MemoryBytes),
		Containers: u.Containers + 1 - api.MaxContainersPerGPU}
	s, ok := FewestOn(hs, d)
	return gpuVictims{gpu: g.Index, VictimSet: s}, ok
}

// holdingOn sums an assignment's shares on one GPU.
func holdingOn(a *api.Assignment, idx int32) (DeviceHolder, bool) {
	var h DeviceHolder
	found := false
	if a == nil {
		return h, false
	}
	for _, c := range a.Containers {
		for _, g := range c.GPUs {
			if g.Index == idx {
				found = true
				h.Units += g.Units
				h.Bytes += g.MemoryBytes
				h.Containers++
			}
		}
	}
	return h, found
}

func uids(vs []Victim) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.UID
	}
	return out
}
