package alloc

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// place fits req on every node and reserves on the best-scoring one, as the
// scheduler does; it returns false when no node fits.
func place(b *Books, uid string, req *api.PodRequest, nodes []string) bool {
	best, bestScore := "", int64(-1)
	for _, n := range nodes {
		if b.Check(n, req, t0) != nil {
			continue
		}
		if s := b.Score(n, req); s > bestScore {
			best, bestScore = n, s
		}
	}
	if best == "" {
		return false
	}
	a, err := b.Fit(best, req, t0)
	return err == nil && b.Reserve(uid, a) == nil
}

func randomRequest(r *rand.Rand) *api.PodRequest {
	switch r.IntN(4) {
	case 0:
		return whole(1 + r.IntN(2))
	default:
		return share(int64(10*(1+r.IntN(5))), int64(1+r.IntN(4)))
	}
}

// TestChurnKeepsBooksExact: random reserves and releases never over-commit,
// and releasing everything leaves the books empty.
func TestChurnKeepsBooksExact(t *testing.T) {
	for _, policy := range api.Placements() {
		t.Run(string(policy), func(t *testing.T) {
			c := cfg()
			c.DefaultPlacement = policy
			b := NewBooks(c)
			var nodes []string
			for i := 0; i < 8; i++ {
				n := node(fmt.Sprint("n", i), 4)
				setNode(b, n)
				nodes = append(nodes, n.Name)
			}
			r := rand.New(rand.NewPCG(1, uint64(len(policy))))
			live := map[string]bool{}
			for i := 0; i < 3000; i++ {
				if r.IntN(3) == 0 && len(live) > 0 {
					keys := make([]string, 0, len(live))
					for k := range live {
						keys = append(keys, k)
					}
					sort.Strings(keys)
					k := keys[r.IntN(len(keys))]
					b.Release(k)
					delete(live, k)
					continue
				}
				uid := fmt.Sprint("p", i)
				if place(b, uid, randomRequest(r), nodes) {
					live[uid] = true
				}
				if oc := b.Overcommitted(); len(oc) > 0 {
					t.Fatalf("step %d: overcommitted %v", i, oc)
				}
			}
			for k := range live {
				b.Release(k)
			}
			if q := b.Quality(); q.UsedGPUs != 0 || b.Pods() != 0 {
				t.Fatalf("not empty after releasing all: %+v", q)
			}
		})
	}
}

// TestPlacementQuality: for the same shares, binpack leaves fewer GPUs
// partly used than spread, and spread leaves node load more even.
func TestPlacementQuality(t *testing.T) {
	run := func(policy api.Placement) Quality {
		c := cfg()
		c.DefaultPlacement = policy
		b := NewBooks(c)
		var nodes []string
		for i := 0; i < 16; i++ {
			n := node(fmt.Sprint("n", i), 8)
			setNode(b, n)
			nodes = append(nodes, n.Name)
		}
		r := rand.New(rand.NewPCG(7, 7))
		for i := 0; i < 200; i++ {
			place(b, fmt.Sprint(i), share(int64(10*(1+r.IntN(5))), 1), nodes)
		}
		return b.Quality()
	}
	bp, sp := run(api.PlacementBinpack), run(api.PlacementSpread)
	t.Logf("binpack %+v", bp)
	t.Logf("spread  %+v", sp)
	if bp.Fragmentation >= sp.Fragmentation || bp.UsedGPUs >= sp.UsedGPUs {
		t.Fatalf("binpack fragmentation %.2f (%d GPUs) not below spread %.2f (%d GPUs)", bp.Fragmentation, bp.UsedGPUs, sp.Fragmentation, sp.UsedGPUs)
	}
	if sp.NodeLoadStddev >= bp.NodeLoadStddev {
		t.Fatalf("spread node load stddev %.3f not below binpack %.3f", sp.NodeLoadStddev, bp.NodeLoadStddev)
	}
}
