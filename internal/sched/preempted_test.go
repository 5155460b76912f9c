package sched

import (
	"testing"
	"time"
)

// TestPreempted: a preemptor waits while the books still hold any victim of
// its committed preemption on its node, not once they are released, not
// past the ttl, and not for victims of a node it was not nominated to.
func TestPreempted(t *testing.T) {
	t0 := time.Unix(1000, 0)
	held := map[string]bool{"v1": true, "v2": true, "w1": true}
	holds := func(uid, node string) bool { return node == "n1" && held[uid] }
	p := newPreempted(time.Minute)
	p.chose("hi", "n1", []string{"v1", "v2"})
	p.chose("hi", "n2", []string{"w1"})
	if p.waiting("hi", t0, holds) {
		t.Fatal("waiting before any commit")
	}
	p.commit("hi", "n1", t0)
	if !p.waiting("hi", t0.Add(time.Second), holds) {
		t.Fatal("not waiting while both victims are held")
	}
	held["v1"] = false
	if !p.waiting("hi", t0.Add(2*time.Second), holds) {
		t.Fatal("not waiting while one victim is held")
	}
	held["v2"] = false
	if p.waiting("hi", t0.Add(3*time.Second), holds) {
		t.Fatal("waiting once the victims are released")
	}
	held["v2"] = true // the record went with the release: a later holder is not waited on
	if p.waiting("hi", t0.Add(4*time.Second), holds) {
		t.Fatal("the record outlived the release")
	}
	p.chose("hi", "n1", []string{"v2"})
	p.commit("hi", "n1", t0)
	if p.waiting("hi", t0.Add(time.Minute), holds) {
		t.Fatal("waiting past the ttl")
	}
	p.chose("lo", "n1", []string{"v2"})
	p.commit("lo", "", t0) // preemption found no node
	if p.waiting("lo", t0, holds) || len(p.dry) != 0 || len(p.final) != 0 {
		t.Fatalf("a failed preemption left records: dry %v final %v", p.dry, p.final)
	}
	p.chose("x", "n1", []string{"v2"})
	p.commit("x", "n1", t0)
	p.forget("x")
	if p.waiting("x", t0, holds) {
		t.Fatal("a forgotten pod still waits")
	}
}
