package sched

import (
	"fmt"
	"sort"
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

// TestPreemptedNominated: the nodes preemptors were nominated to are known
// to the others until they are bound or deleted; a preemptor waits on its
// own victims only.
func TestPreemptedNominated(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := newPreempted(time.Minute)
	p.chose("a", "n1", []string{"v1"})
	p.commit("a", "n1", t0)
	p.commit("b", "n1", t0) // no victims: nominated all the same
	p.commit("c", "n2", t0)
	p.commit("d", "", t0) // no node
	got := p.nominatedNodes("a")
	sort.Strings(got)
	if fmt.Sprint(got) != "[n1 n2]" {
		t.Fatalf("nominated nodes seen by a = %v", got)
	}
	if got := p.nominatedNodes("c"); fmt.Sprint(got) != "[n1]" {
		t.Fatalf("nominated nodes seen by c = %v", got)
	}
	if !p.waitsOnOthers("a", "v9", t0) || p.waitsOnOthers("a", "v1", t0) || p.waitsOnOthers("b", "v9", t0) {
		t.Fatal("waitsOnOthers: a waits on v1 only, b on nothing")
	}
	if p.waitsOnOthers("a", "v9", t0.Add(time.Minute)) {
		t.Fatal("waitsOnOthers past the ttl: a may preempt again, any release helps it")
	}
	p.forget("b")
	p.forget("c")
	if got := p.nominatedNodes("x"); fmt.Sprint(got) != "[n1]" {
		t.Fatalf("after forgetting b and c: %v", got)
	}
}
