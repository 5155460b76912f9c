package sched

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

func TestRowMayAdmitMore(t *testing.T) {
	base := gpuNode("n1", 2, t0)
	later := t0.Add(10 * time.Second)
	beat := func(g *v1alpha2.GPUNode, at time.Time) *v1alpha2.GPUNode {
		c := g.DeepCopy()
		c.Status.UpdateTime = metav1.NewTime(at)
		return c
	}
	cases := []struct {
		name     string
		old, cur *v1alpha2.GPUNode
		now      time.Time
		want     bool
	}{
		{"added", nil, base, later, true},
		{"deleted", base, nil, later, false},
		{"updateTime only", base, beat(base, later), later, false},
		{"state", base, func() *v1alpha2.GPUNode { c := beat(base, later); c.Status.State = v1alpha2.NodeDraining; return c }(), later, true},
		{"gpu freed", base, func() *v1alpha2.GPUNode { c := beat(base, later); c.Status.GPUs[1].UtilizationPercent = 5; return c }(), later, true},
	}
	for _, tc := range cases {
		if got := rowMayAdmitMore(tc.old, tc.cur); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
