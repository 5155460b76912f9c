package v1alpha1

import (
	"errors"
	"strings"
	"testing"
)

func TestGPUNodeValidate(t *testing.T) {
	good := func() *GPUNode {
		n := &GPUNode{Status: GPUNodeStatus{State: NodeWorking, GPUs: []GPU{
			{Index: 0, UUID: "a", MemoryBytes: 1, UnitsTotal: 100, Health: GPUHealthy},
			{Index: 1, UUID: "b", MemoryBytes: 1, UnitsTotal: 100, Health: GPUUnhealthy, UtilizationPercent: 100},
		}}}
		n.Name = "n"
		return n
	}
	if err := good().Validate(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		mut  func(*GPUNode)
		want string
	}{
		"state":     {func(n *GPUNode) { n.Status.State = "Busy" }, "state"},
		"dup index": {func(n *GPUNode) { n.Status.GPUs[1].Index = 0 }, "duplicate"},
		"dup uuid":  {func(n *GPUNode) { n.Status.GPUs[1].UUID = "a" }, "uuid"},
		"units":     {func(n *GPUNode) { n.Status.GPUs[0].UnitsTotal = 0 }, "positive"},
		"health":    {func(n *GPUNode) { n.Status.GPUs[0].Health = "" }, "health"},
		"util":      {func(n *GPUNode) { n.Status.GPUs[0].UtilizationPercent = 101 }, "utilization"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := good()
			tc.mut(n)
			err := n.Validate()
			if !errors.Is(err, ErrInvalidGPUNode) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestSummarizeAndDeepCopy(t *testing.T) {
	gpus := []GPU{{UnitsTotal: 100, UnitsFree: 40, MemoryBytes: 10, MemoryFreeBytes: 3, Health: GPUHealthy}, {UnitsTotal: 100, UnitsFree: 100, MemoryBytes: 10, MemoryFreeBytes: 10, Health: GPUUnhealthy}}
	s := Summarize(gpus)
	s.Memory, s.MemoryFree = nil, nil
	if s != (Summary{GPUs: 2, HealthyGPUs: 1, UnitsTotal: 200, UnitsFree: 140, MemoryBytes: 20, MemoryFreeBytes: 13}) {
		t.Fatalf("summary = %+v", s)
	}
	n := &GPUNode{Status: GPUNodeStatus{GPUs: gpus}}
	c := n.DeepCopy()
	c.Status.GPUs[0].UnitsFree = 0
	if n.Status.GPUs[0].UnitsFree != 40 {
		t.Fatal("DeepCopy shares the GPU slice")
	}
}

func TestSummaryHumanUnits(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		want  string
	}{
		{80 << 30, "80Gi"},
		{81559<<20 + 12345, "81559Mi"},
		{1<<20 - 1, "0"},
		{0, "0"},
	} {
		s := Summarize([]GPU{{MemoryBytes: tc.bytes, MemoryFreeBytes: tc.bytes}})
		if got := s.Memory.String(); got != tc.want || s.MemoryFree.String() != tc.want {
			t.Errorf("%d bytes: memory %s, memoryFree %s, want %s", tc.bytes, got, s.MemoryFree, tc.want)
		}
	}
}
