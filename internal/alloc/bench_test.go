package alloc

import (
	"fmt"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// benchBooks: 1,000 nodes x 8 GPUs, each node a quarter used by shares.
func benchBooks(b *testing.B) (*Books, []string) {
	b.Helper()
	bk := NewBooks(cfg())
	var names []string
	for i := 0; i < 1000; i++ {
		n := node(fmt.Sprint("n", i), 8)
		setNode(bk, n)
		names = append(names, n.Name)
		for j := 0; j < 4; j++ {
			a, err := bk.Fit(n.Name, share(50, 2), t0)
			if err != nil {
				b.Fatal(err)
			}
			if err := bk.Reserve(fmt.Sprint(i, "-", j), a); err != nil {
				b.Fatal(err)
			}
		}
	}
	return bk, names
}

// BenchmarkFit is Reserve's work: the full fit that builds the assignment.
func BenchmarkFit(b *testing.B) {
	bk, names := benchBooks(b)
	req := share(30, 4)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := bk.Fit(names[i%len(names)], req, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFilterScore is the per-node work of one scheduling cycle: fit
// check then score, for a fractional and a whole-GPU request.
func BenchmarkFilterScore(b *testing.B) {
	bk, names := benchBooks(b)
	for _, tc := range []struct {
		name string
		req  *api.PodRequest
	}{{"share", share(30, 4)}, {"whole", whole(1)}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				n := names[i%len(names)]
				if err := bk.Check(n, tc.req, t0); err != nil {
					b.Fatal(err)
				}
				_ = bk.Score(n, tc.req)
			}
		})
	}
}

// BenchmarkBest ranks nodes for one pod (the scheduler's PreFilter): 1,000
// nodes all partly used, and 5,000 nodes of which 100 are partly used.
func BenchmarkBest(b *testing.B) {
	req := share(30, 4)
	b.Run("1000-partly-used", func(b *testing.B) {
		bk, _ := benchBooks(b)
		runBest(b, bk, req)
	})
	b.Run("5000-mostly-empty", func(b *testing.B) {
		bk := NewBooks(cfg())
		for i := 0; i < 5000; i++ {
			n := node(fmt.Sprintf("n%04d", i), 8)
			setNode(bk, n)
			if i%50 == 0 {
				a, err := bk.Fit(n.Name, share(50, 2), t0)
				if err != nil {
					b.Fatal(err)
				}
				if err := bk.Reserve(n.Name, a); err != nil {
					b.Fatal(err)
				}
			}
		}
		runBest(b, bk, req)
	})
}

func runBest(b *testing.B, bk *Books, req *api.PodRequest) {
	b.ReportAllocs()
	for b.Loop() {
		if got := bk.Best(req, t0, 32); len(got) != 32 {
			b.Fatalf("got %d nodes", len(got))
		}
	}
}
