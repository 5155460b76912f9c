package alloc

import (
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// TestOverlayRemovedAndAdded: removed pods free their shares for the
// check; added (nominated) pods take theirs first; the books are unchanged.
func TestOverlayRemovedAndAdded(t *testing.T) {
	b, _ := bookAll(t, 1, []booked{{"a", 0, 60, 4, 0, false}, {"b", 0, 40, 4, 0, false}})
	if err := b.Check("n1", share(50, 1), t0); err == nil {
		t.Fatal("a full GPU admitted 50 units")
	}
	o := &Overlay{}
	o.Remove("a", true)
	if err := b.CheckWith("n1", share(50, 1), t0, o); err != nil {
		t.Fatalf("without a: %v", err)
	}
	o.Add("p", share(50, 1)) // nominated: takes 50 of a's 60 first
	if err := b.CheckWith("n1", share(20, 1), t0, o); err == nil {
		t.Fatal("20 units fit beside a nominated pod's 50 in 60")
	}
	if err := b.CheckWith("n1", share(10, 1), t0, o); err != nil {
		t.Fatalf("10 units beside the nominated pod: %v", err)
	}
	o.Remove("p", false) // the nominated pod taken off again
	if !o.Restore("a") || !o.Empty() {
		t.Fatalf("overlay not empty after undoing: %+v", o)
	}
	if u := b.Usage("n1")[0]; u.Units != 100 || u.Pods != 2 {
		t.Fatalf("books changed: %+v", u)
	}
}

// TestOverlayNominatedHeldBySpread: a spread pod placed beside a nominated
// one must not take the only GPU the nominated pod fits on.
func TestOverlayNominatedHeldBySpread(t *testing.T) {
	b, _ := bookAll(t, 2, []booked{{"a", 0, 50, 1, 0, false}, {"b", 1, 65, 1, 0, false}})
	o := &Overlay{Added: []Nominated{{UID: "p", Req: share(50, 1)}}}
	q := share(30, 1)
	q.Placement = api.PlacementSpread
	a, err := b.FitWith("n1", q, t0, o)
	if err != nil {
		t.Fatal(err)
	}
	if g := a.Containers[0].GPUs[0].Index; g != 1 {
		t.Fatalf("spread pod got GPU %d, the nominated pod's only fit; want 1", g)
	}
	if a, _ := b.Fit("n1", q, t0); a.Containers[0].GPUs[0].Index != 0 {
		t.Fatal("without the nominated pod spread would pick GPU 0: the test shows nothing")
	}
}

// TestOverlayNominatedNotFitting: a nominated pod that does not fit holds
// nothing.
func TestOverlayNominatedNotFitting(t *testing.T) {
	b, _ := bookAll(t, 1, []booked{{"a", 0, 60, 1, 0, false}})
	o := &Overlay{Added: []Nominated{{UID: "p", Req: share(50, 1)}}}
	if err := b.CheckWith("n1", share(40, 1), t0, o); err != nil {
		t.Fatalf("a nominated pod that cannot fit held capacity: %v", err)
	}
}

// TestOverlayBusyGPUFreed: a GPU over the utilization threshold is a
// candidate once pods are taken off it (their work is in the measurement).
func TestOverlayBusyGPUFreed(t *testing.T) {
	b, _ := bookAll(t, 1, []booked{{"a", 0, 100, 1, 0, false}})
	n := node("n1", 1)
	n.GPUs[0].UtilizationPercent = 99
	b.SetNode(n)
	if err := b.CheckWith("n1", share(50, 1), t0, &Overlay{Removed: []string{"a"}}); err != nil {
		t.Fatalf("busy GPU freed of its pod: %v", err)
	}
	if got, err := b.Victims("n1", share(50, 1), t0, nil, []Victim{{UID: "a"}}); err != nil || len(got) != 1 {
		t.Fatalf("victims on a busy GPU: %v, %v", got, err)
	}
}
