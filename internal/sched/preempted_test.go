package sched

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/pkg/api"
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

// TestPreemptedNominated: the capacity held for preemptors nominated to a
// node is known to the others of at most their priority until they are
// bound (hold it in the books), deleted, or their nomination cleared, in
// the order they were nominated; a preemptor waits on its own victims only.
func TestPreemptedNominated(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := newPreempted(time.Minute)
	req := func(units int64) *api.PodRequest {
		return &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: 1, Units: units}}}
	}
	p.chose("a", "n1", []string{"v1"})
	p.commit("a", "n1", t0)
	p.nominate("a", "n1", 1000, req(50))
	p.nominate("b", "n1", 1000, req(80)) // no victims: nominated all the same
	p.nominate("c", "n2", 500, req(30))
	p.nominate("d", "n3", 1000, req(10))
	p.nominate("d", "", 1000, req(10)) // its next preemption found no node: cleared
	none := func(string, string) bool { return false }
	held := func(pod string, prio int32, holds func(string, string) bool) string {
		var out []string
		for node, o := range p.held(types.UID(pod), prio, holds) {
			var uids []string
			for _, a := range o.Added {
				uids = append(uids, fmt.Sprintf("%s:%d", a.UID, a.Req.Containers[0].Units))
			}
			out = append(out, node+"="+strings.Join(uids, ","))
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	if got := held("a", 0, none); got != "n1=b:80 n2=c:30" {
		t.Fatalf("held for a = %q", got)
	}
	if got := held("x", 0, none); got != "n1=a:50,b:80 n2=c:30" {
		t.Fatalf("held for x = %q, want a before b (nomination order)", got)
	}
	if got := held("x", 1000, none); got != "n1=a:50,b:80" {
		t.Fatalf("held for x of priority 1000 = %q, want none for c (priority 500)", got)
	}
	if got := held("x", 0, func(uid, node string) bool { return uid == "a" && node == "n1" }); got != "n1=b:80 n2=c:30" {
		t.Fatalf("held with a booked on n1 = %q", got)
	}
	if !p.waitsOnOthers("a", "v9", t0) || p.waitsOnOthers("a", "v1", t0) || p.waitsOnOthers("b", "v9", t0) {
		t.Fatal("waitsOnOthers: a waits on v1 only, b on nothing")
	}
	if p.waitsOnOthers("a", "v9", t0.Add(time.Minute)) {
		t.Fatal("waitsOnOthers past the ttl: a may preempt again, any release helps it")
	}
	p.forget("b")
	p.forget("c")
	if got := held("x", 0, none); got != "n1=a:50" {
		t.Fatalf("after forgetting b and c: %q", got)
	}
}
