package alloc

import (
	"fmt"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
)

func TestBest(t *testing.T) {
	b := NewBooks(cfg()) // binpack
	for _, n := range []string{"n3", "n1", "n2", "n4"} {
		setNode(b, node(n, 2))
	}
	mustReserveOn := func(uid, n string, r *api.PodRequest) {
		a, err := b.Fit(n, r, t0)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Reserve(uid, a); err != nil {
			t.Fatal(err)
		}
	}
	mustReserveOn("a", "n2", share(50, 8))
	mustReserveOn("b", "n4", whole(2)) // full: never a candidate
	got := fmt.Sprint(b.Best(share(10, 1), t0, 2))
	if got != "[{n2 29} {n1 4}]" {
		t.Fatalf("binpack best = %s", got)
	}
	req := share(10, 1)
	req.Placement = api.PlacementSpread
	if got := fmt.Sprint(b.Best(req, t0, 3)); got != "[{n1 96} {n3 96} {n2 71}]" {
		t.Fatalf("spread best = %s", got)
	}
	req.Placement = api.PlacementFirstFit
	if got := fmt.Sprint(b.Best(req, t0, 10)); got != "[{n1 0} {n2 0} {n3 0}]" {
		t.Fatalf("first-fit best = %s", got)
	}
	// Chunked ranking merges to the same answer.
	var lists [][]Ranked
	for _, c := range b.Chunks(3) {
		lists = append(lists, b.BestIn(c, share(10, 1), t0, 2))
	}
	if got := fmt.Sprint(MergeBest(2, lists...)); got != "[{n2 29} {n1 4}]" {
		t.Fatalf("merged = %s", got)
	}
	// The cached name order follows membership changes.
	b.RemoveNode("n1")
	setNode(b, node("n0", 2))
	if got := fmt.Sprint(b.Best(req, t0, 2)); got != "[{n0 0} {n2 0}]" {
		t.Fatalf("after changes = %s", got)
	}
}
