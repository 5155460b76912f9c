package alloc

import (
	"sort"
	"time"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// Ranked is a node that fits a request, with its policy score.
type Ranked struct {
	Node  string
	Score int64
}

// Best returns up to k nodes that fit req with the highest scores, best
// first; ties go to the node whose name sorts first (so first-fit takes nodes
// in name order). It considers every node with a table row (see bestIn for
// the shortcuts): the scheduler can then filter and score only these
// instead of a sample of the cluster.
func (b *Books) Best(req *api.PodRequest, now time.Time, k int) []Ranked {
	b.sortedNames()
	return b.bestIn(0, len(b.names), req, now, k, nil)
}

// bestIn ranks the given nodes (in name order). Nodes holding nothing are
// alike for ranking (same shape, same score in a homogeneous cluster), so
// only the first k of them are looked at; first-fit stops at the first k
// fitting nodes. Partly used nodes are all ranked. A node in held is
// checked as its overlay leaves it (capacity held for pods nominated there);
// a node without one is passed over at once when its summary rules req out.
func (b *Books) bestIn(lo, hi int, req *api.PodRequest, now time.Time, k int, held map[string]*Overlay) []Ranked {
	if k <= 0 {
		return nil
	}
	firstFit := b.policy(req) == api.PlacementFirstFit
	top := make([]Ranked, 0, k)
	empties := 0
	for j := lo; j < hi; j++ {
		n, ns := b.names[j], b.states[j]
		o := held[n]
		empty := ns.used.len() == 0 && o.Empty()
		if empty && empties >= k {
			continue
		}
		if o.Empty() && !ns.sum.mayFit(req) {
			continue // full for req: no fit needed to tell
		}
		if b.fit(n, req, now, o, nil, false) != nil {
			continue
		}
		if empty {
			empties++
		}
		s := b.Score(n, req)
		if len(top) == k && s <= top[k-1].Score {
			continue
		}
		// insert after every entry with a score >= s (keeps name order on ties)
		i := sort.Search(len(top), func(i int) bool { return top[i].Score < s })
		if len(top) < k {
			top = append(top, Ranked{})
		}
		copy(top[i+1:], top[i:len(top)-1])
		top[i] = Ranked{Node: n, Score: s}
		if firstFit && len(top) == k {
			break
		}
	}
	return top
}

// MergeBest merges ranked lists (each best first) into the best k.
func MergeBest(k int, lists ...[]Ranked) []Ranked {
	var all []Ranked
	for _, l := range lists {
		all = append(all, l...)
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].Score != all[j].Score {
			return all[i].Score > all[j].Score
		}
		return all[i].Node < all[j].Node
	})
	if len(all) > k {
		all = all[:k]
	}
	return all
}

// sortedNames returns the names of nodes with a table row, sorted, and
// caches them with their states (b.states) until a node is added or
// removed; callers must not modify the slices.
func (b *Books) sortedNames() []string {
	if b.names == nil {
		names := make([]string, 0, len(b.nodes))
		for n, ns := range b.nodes {
			if ns.table != nil {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		b.states = make([]*nodeState, len(names))
		for i, n := range names {
			b.states[i] = b.nodes[n]
		}
		b.names = names
	}
	return b.names
}

// Chunks splits the sorted nodes into n contiguous index ranges [lo, hi)
// for parallel ranking with BestIn.
func (b *Books) Chunks(n int) [][2]int {
	total := len(b.sortedNames())
	n = max(n, 1)
	size := max((total+n-1)/n, 1)
	var out [][2]int
	for i := 0; i < total; i += size {
		out = append(out, [2]int{i, min(i+size, total)})
	}
	return out
}

// BestIn is Best over one range from Chunks (valid until the next node is
// added or removed), the nodes in held (nil: none) as their overlays leave
// them.
func (b *Books) BestIn(r [2]int, req *api.PodRequest, now time.Time, k int, held map[string]*Overlay) []Ranked {
	return b.bestIn(r[0], r[1], req, now, k, held)
}

// Refusals returns why req fits on none of the first max nodes in name order
// (Check's reasons, each naming its node): what a pod rejected before any
// node was filtered is told, as Filter would have told it node by node.
func (b *Books) Refusals(req *api.PodRequest, now time.Time, max int) []string {
	var out []string
	for _, n := range b.sortedNames() {
		if len(out) == max {
			break
		}
		if err := b.Check(n, req, now); err != nil {
			out = append(out, err.Error())
		}
	}
	return out
}
