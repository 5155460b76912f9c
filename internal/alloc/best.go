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
// in name order). It looks at every node with a table row: the scheduler can
// then filter and score only these instead of a sample of the cluster.
func (b *Books) Best(req *api.PodRequest, now time.Time, k int) []Ranked {
	return b.bestIn(b.sortedNames(), req, now, k)
}

// bestIn ranks the given nodes (in name order).
func (b *Books) bestIn(names []string, req *api.PodRequest, now time.Time, k int) []Ranked {
	if k <= 0 {
		return nil
	}
	top := make([]Ranked, 0, k)
	for _, n := range names {
		if b.Check(n, req, now) != nil {
			continue
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

// sortedNames returns the names of nodes with a table row, sorted. The
// slice is cached until a node is added or removed; callers must not modify it.
func (b *Books) sortedNames() []string {
	if b.names == nil {
		names := make([]string, 0, len(b.nodes))
		for n, ns := range b.nodes {
			if ns.table != nil {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		b.names = names
	}
	return b.names
}

// Chunks splits the sorted node names into n contiguous parts for parallel
// ranking with BestIn.
func (b *Books) Chunks(n int) [][]string {
	names := b.sortedNames()
	if n < 1 {
		n = 1
	}
	size := (len(names) + n - 1) / n
	var out [][]string
	for i := 0; i < len(names); i += max(size, 1) {
		out = append(out, names[i:min(i+size, len(names))])
	}
	return out
}

// BestIn is Best over one chunk of nodes from Chunks.
func (b *Books) BestIn(names []string, req *api.PodRequest, now time.Time, k int) []Ranked {
	return b.bestIn(names, req, now, k)
}
