package alloc

import (
	"errors"
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
		lists = append(lists, b.BestIn(c, share(10, 1), t0, 2, nil))
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

// TestBestHeld: a node whose free capacity is held (an overlay of pods
// nominated there) is not ranked when the held pods leave too little, and is
// when they leave enough; a refusal costs no message (errNoFit).
func TestBestHeld(t *testing.T) {
	b := NewBooks(cfg())
	setNode(b, node("n1", 1))
	setNode(b, node("n2", 1))
	a, err := b.Fit("n2", whole(1), t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Reserve("full", a); err != nil {
		t.Fatal(err)
	}
	all := func(held map[string]*Overlay) string {
		var lists [][]Ranked
		for _, c := range b.Chunks(1) {
			lists = append(lists, b.BestIn(c, share(60, 8), t0, 5, held))
		}
		return fmt.Sprint(MergeBest(5, lists...))
	}
	if got := all(nil); got != "[{n1 55}]" {
		t.Fatalf("nothing held: %s", got)
	}
	big := &Overlay{}
	big.Add("nominee", share(50, 8))
	if got := all(map[string]*Overlay{"n1": big}); got != "[]" {
		t.Fatalf("n1 held for a 50-unit nominee, 60 asked: %s", got)
	}
	small := &Overlay{}
	small.Add("nominee", share(40, 8))
	if got := all(map[string]*Overlay{"n1": small}); got != "[{n1 55}]" {
		t.Fatalf("n1 held for a 40-unit nominee, 60 asked: %s", got)
	}
	if err := b.fit("n2", share(60, 8), t0, nil, nil, false); !errors.Is(err, errNoFit) {
		t.Fatalf("quiet refusal = %v, want errNoFit", err)
	}
	if err := b.fit("n9", share(60, 8), t0, nil, nil, false); !errors.Is(err, errNoFit) {
		t.Fatalf("quiet refusal of an unknown node = %v, want errNoFit", err)
	}
}
