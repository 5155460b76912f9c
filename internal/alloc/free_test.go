package alloc

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

func TestFreeWhole(t *testing.T) {
	cases := []struct {
		name  string
		setup func(n *Node, b *Books)
		now   time.Time
		want  string
	}{
		{"all free", func(*Node, *Books) {}, t0, "[0 1 2 3]"},
		{"held whole or shared are not free", func(_ *Node, b *Books) {
			a, err := b.Fit("n", whole(1), t0)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Reserve("w", a); err != nil {
				t.Fatal(err)
			}
			a, err = b.Fit("n", share(10, 1), t0)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Reserve("s", a); err != nil {
				t.Fatal(err)
			}
		}, t0, "[2 3]"},
		{"unhealthy, busy, foreign skipped", func(n *Node, _ *Books) {
			n.GPUs[0].Healthy = false
			n.GPUs[1].UtilizationPercent = 91
			n.GPUs[2].UnscheduledProcesses = 1
		}, t0, "[3]"},
		{"draining node", func(n *Node, _ *Books) { n.State = v1alpha2.NodeDraining }, t0, "[]"},
		{"stale heartbeat", func(*Node, *Books) {}, t0.Add(31 * time.Second), "[]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBooks(cfg())
			n := node("n", 4)
			setNode(b, n)
			tc.setup(&n, b)
			setNode(b, n)
			var got []int32
			for _, g := range b.FreeWhole("n", tc.now) {
				got = append(got, g.Index)
			}
			if s := fmt.Sprint(got); s != tc.want && !(tc.want == "[]" && got == nil) {
				t.Fatalf("FreeWhole = %s, want %s", s, tc.want)
			}
		})
	}
	if got := NewBooks(cfg()).FreeWhole("none", t0); got != nil {
		t.Fatalf("unknown node: %v", got)
	}
}
