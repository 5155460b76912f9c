package sched

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestReservations: a whole-device pod gets a reservation only after
// reserveAfter of failures; the node is then held against pods of no higher
// priority, not against itself or a higher one, until the pod is bound or
// deleted or reserveTTL passes.
func TestReservations(t *testing.T) {
	r := newReservations()
	t0 := time.Unix(1000, 0)
	if r.failed("w", t0) || r.failed("w", t0.Add(reserveAfter-time.Millisecond)) {
		t.Fatal("reservation before reserveAfter")
	}
	if !r.failed("w", t0.Add(reserveAfter)) {
		t.Fatal("no reservation after reserveAfter")
	}
	r.reserve("w", "n1", 10, t0.Add(reserveAfter))
	now := t0.Add(reserveAfter + time.Second)
	if r.failed("w", now) {
		t.Fatal("a second reservation while the first holds")
	}
	for _, c := range []struct {
		pod  string
		prio int32
		node string
		want string
	}{{"q", 10, "n1", "w"}, {"q", 0, "n1", "w"}, {"q", 11, "n1", ""}, {"q", 0, "n2", ""}, {"w", 10, "n1", ""}} {
		if got := r.heldFrom(types.UID(c.pod), c.prio, c.node, now); string(got) != c.want {
			t.Errorf("pod %s prio %d on %s: held for %q, want %q", c.pod, c.prio, c.node, got, c.want)
		}
	}
	if got := r.heldFrom("q", 0, "n1", t0.Add(reserveAfter+reserveTTL)); got != "" {
		t.Errorf("held past reserveTTL for %q", got)
	}
	r.forget("w")
	if got := r.heldFrom("q", 0, "n1", now); got != "" {
		t.Errorf("held for %q after the pod was bound", got)
	}
}
