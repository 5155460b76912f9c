package sched

import (
	"fmt"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// BenchmarkPreFilterRetry: PreFilter's work for a 50-unit preemptor back
// from its preemption on the bench-scheduler preemption phase's cluster
// (1,000 nodes of 8 GPUs, all held: 6 whole, 2 by two 50-unit shares; its
// victim on n0500 gone): ranking every node by the books, against the check
// of its nominated node alone.
func BenchmarkPreFilterRetry(b *testing.B) {
	l := newPhaseBooks()
	for n := range phaseNodes {
		fillPhaseNode(b, l, fmt.Sprintf("n%04d", n))
	}
	l.Release("n0500-9")
	hi := prioritized(gpuPod("hi", 50), 1000)
	hi.Status.NominatedNodeName = "n0500"
	req, _ := api.ParseRequest(hi)
	p := &Plugin{alloc: l, wait: &waiters{}, candidates: 32}
	b.Run("rank every node", func(b *testing.B) {
		for range b.N {
			if got := l.Best(req, p.candidates, nil); len(got) != 1 || got[0] != "n0500" {
				b.Fatalf("best %v", got)
			}
		}
	})
	b.Run("nominated node", func(b *testing.B) {
		for range b.N {
			if got := p.fitsNominated(hi, req); got != "n0500" {
				b.Fatalf("nominated %q", got)
			}
		}
	})
}
