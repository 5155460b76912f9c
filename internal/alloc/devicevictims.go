package alloc

import (
	"math/bits"
	"slices"
	"sort"
)

// DeviceHolder is one evictable pod's holding on one device: what evicting
// it frees there.
type DeviceHolder struct {
	Victim
	// Pos is the pod's place among the candidates, least important first:
	// among equally cheap sets, the one of the least important pods wins.
	Pos          int
	Units, Bytes int64
	Containers   int
}

// DeviceNeed is what must be freed on one device for a request to fit there:
// units, bytes and container slots still missing (zero or less: none), or
// All: every holder must go (the request takes the device whole, or a holder
// holds it whole). Holders counts the pods holding the device, evictable or
// not.
type DeviceNeed struct {
	Units, Bytes int64
	Containers   int
	All          bool
	Holders      int
}

// VictimSet is a set of pods whose eviction frees enough on one device.
type VictimSet struct {
	UIDs      []string
	MaxPrio   int32
	SumPrio   int64
	preferred int // sum of positions among the candidates
}

// Better orders sets as preemption prefers them: fewest pods, then the
// lowest highest priority, the lowest sum of priorities, then the least
// important pods. Any set is better than nil.
func (s VictimSet) Better(o *VictimSet) bool {
	switch {
	case o == nil:
		return true
	case len(s.UIDs) != len(o.UIDs):
		return len(s.UIDs) < len(o.UIDs)
	case s.MaxPrio != o.MaxPrio:
		return s.MaxPrio < o.MaxPrio
	case s.SumPrio != o.SumPrio:
		return s.SumPrio < o.SumPrio
	default:
		return s.preferred < o.preferred
	}
}

// FewestOn chooses the cheapest set of hs (the evictable holders of one
// device) whose eviction frees need there (Better's order; exact up to
// exactVictims holders, greedy above). ok is false when evicting all of hs
// would not do. The device-plugin path (Books.Victims, one GPU of the books)
// and the DRA path (one device of a ResourceSlice, its claims' consumed
// capacity) both choose with it.
func FewestOn(hs []DeviceHolder, need DeviceNeed) (VictimSet, bool) {
	if need.All {
		if len(hs) < need.Holders {
			return VictimSet{}, false
		}
		return makeSet(hs), true
	}
	du, dm, dc := need.Units, need.Bytes, need.Containers
	if du <= 0 && dm <= 0 && dc <= 0 {
		return VictimSet{}, true
	}
	enough := func(set []DeviceHolder) bool {
		var fu, fm int64
		var fc int
		for _, h := range set {
			fu, fm, fc = fu+h.Units, fm+h.Bytes, fc+h.Containers
		}
		return fu >= du && fm >= dm && fc >= dc
	}
	if !enough(hs) {
		return VictimSet{}, false
	}
	if len(hs) <= exactVictims {
		return fewestExact(hs, enough), true
	}
	return fewestGreedy(hs, du, dm, dc), true
}

// fewestExact tries every subset, smallest first, and keeps the best of
// the smallest size that frees enough.
func fewestExact(hs []DeviceHolder, enough func([]DeviceHolder) bool) VictimSet {
	n := len(hs)
	masks := make([]uint32, 0, 1<<n)
	for m := uint32(1); m < 1<<n; m++ {
		masks = append(masks, m)
	}
	sort.SliceStable(masks, func(i, j int) bool { return bits.OnesCount32(masks[i]) < bits.OnesCount32(masks[j]) })
	var best *VictimSet
	size := 0
	set := make([]DeviceHolder, 0, n)
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
			s := makeSet(set)
			if s.Better(best) {
				best, size = &s, k
			}
		}
	}
	return *best
}

// fewestGreedy takes the pods freeing the most (relative to what is
// missing) first; exact for one dimension, close for several.
func fewestGreedy(hs []DeviceHolder, du, dm int64, dc int) VictimSet {
	weight := func(h DeviceHolder) float64 {
		w := 0.0
		if du > 0 {
			w = max(w, float64(h.Units)/float64(du))
		}
		if dm > 0 {
			w = max(w, float64(h.Bytes)/float64(dm))
		}
		if dc > 0 {
			w = max(w, float64(h.Containers)/float64(dc))
		}
		return w
	}
	sorted := slices.Clone(hs)
	sort.SliceStable(sorted, func(i, j int) bool { return weight(sorted[i]) > weight(sorted[j]) })
	var fu, fm int64
	var fc int
	var set []DeviceHolder
	for _, h := range sorted {
		if fu >= du && fm >= dm && fc >= dc {
			break
		}
		set = append(set, h)
		fu, fm, fc = fu+h.Units, fm+h.Bytes, fc+h.Containers
	}
	return makeSet(set)
}

func makeSet(set []DeviceHolder) VictimSet {
	s := VictimSet{MaxPrio: -1 << 31}
	for _, h := range set {
		s.UIDs = append(s.UIDs, h.UID)
		s.MaxPrio = max(s.MaxPrio, h.Priority)
		s.SumPrio += int64(h.Priority)
		s.preferred += h.Pos
	}
	return s
}
