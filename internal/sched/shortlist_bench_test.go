package sched

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// BenchmarkCostAllNodes: the books' cost of preempting for a 50-unit pod on
// each of 1,000 full nodes of 8 GPUs (6 held whole, 2 by two 50-unit
// shares: the bench-scheduler preemption phase's cluster).
func BenchmarkCostAllNodes(b *testing.B) {
	clk := clocktesting.NewFakePassiveClock(t0)
	l := NewBooks(alloc.Config{UtilizationThreshold: 95, HeartbeatTimeout: time.Hour, DefaultPlacement: api.PlacementBinpack}, clk)
	var views []nodeView
	for n := range 1000 {
		name := fmt.Sprintf("n%04d", n)
		if err := setGPUNode(l, gpuNode(name, 8, t0)); err != nil {
			b.Fatal(err)
		}
		v := nodeView{name: name}
		for i := range 10 {
			p := gpuPod(fmt.Sprintf("%s-%d", name, i), 50)
			if i < 6 {
				p = gpuPod(fmt.Sprintf("%s-%d", name, i), 100)
			}
			p.UID = types.UID(p.Name)
			req, err := api.ParseRequest(p)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := l.Reserve(string(p.UID), name, req); err != nil {
				b.Fatal(err)
			}
			v.pods = append(v.pods, p)
		}
		views = append(views, v)
	}
	hi := prioritized(gpuPod("hi", 50), 1000)
	req, _ := api.ParseRequest(hi)
	none := func(*corev1.Pod) bool { return false }
	b.Run("every node", func(b *testing.B) {
		for range b.N {
			found := 0
			for _, v := range views {
				if _, ok := costOn(l, hi, req, v, none); ok {
					found++
				}
			}
			if found != len(views) {
				b.Fatalf("%d of %d nodes", found, len(views))
			}
		}
	})
	b.Run("shortlist", func(b *testing.B) {
		for range b.N {
			if got := cheapestOf(l, hi, req, slices.Values(views), none, shortlistLen); len(got) != shortlistLen {
				b.Fatalf("shortlist %v", got)
			}
		}
	})
}
