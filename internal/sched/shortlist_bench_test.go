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
	l := newPhaseBooks()
	views := make([]nodeView, 0, phaseNodes)
	for n := range phaseNodes {
		name := fmt.Sprintf("n%04d", n)
		views = append(views, nodeView{name: name, pods: fillPhaseNode(b, l, name)})
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

// phaseNodes is the bench-scheduler preemption phase's node count.
const phaseNodes = 1000

// newPhaseBooks returns empty books configured as the bench-scheduler
// preemption phase's scheduler is (binpack), on a fake clock.
func newPhaseBooks() *Books {
	return NewBooks(alloc.Config{UtilizationThreshold: 95, HeartbeatTimeout: time.Hour, DefaultPlacement: api.PlacementBinpack},
		clocktesting.NewFakePassiveClock(t0))
}

// fillPhaseNode puts up node name with 8 GPUs and books it full as the
// phase's fillers hold it (6 pods of a whole GPU, 4 of 50 units on the other
// two) and returns those pods.
func fillPhaseNode(b *testing.B, l *Books, name string) []*corev1.Pod {
	b.Helper()
	if err := setGPUNode(l, gpuNode(name, 8, t0)); err != nil {
		b.Fatal(err)
	}
	var pods []*corev1.Pod
	for i := range 10 {
		units := int64(50)
		if i < 6 {
			units = 100
		}
		p := gpuPod(fmt.Sprintf("%s-%d", name, i), units)
		p.UID = types.UID(p.Name)
		req, err := api.ParseRequest(p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.Reserve(string(p.UID), name, req); err != nil {
			b.Fatal(err)
		}
		pods = append(pods, p)
	}
	return pods
}
