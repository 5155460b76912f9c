package v1alpha2

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestGPUNodeValidate(t *testing.T) {
	good := func() *GPUNode {
		n := &GPUNode{Status: GPUNodeStatus{State: NodeWorking, GPUs: []GPU{
			{Index: 0, UUID: "a", Memory: Bytes(1), UnitsTotal: 100, Health: GPUHealthy},
			{Index: 1, UUID: "b", Memory: Bytes(1), UnitsTotal: 100, Health: GPUUnhealthy, UtilizationPercent: 100},
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
	gpus := []GPU{{UnitsTotal: 100, UnitsFree: 40, Memory: Bytes(10 << 20), MemoryFree: Bytes(3 << 20), Health: GPUHealthy}, {UnitsTotal: 100, UnitsFree: 100, Memory: Bytes(10 << 20), MemoryFree: Bytes(10 << 20), Health: GPUUnhealthy}}
	s := Summarize(gpus)
	if !apiequality.Semantic.DeepEqual(s, Summary{GPUs: 2, HealthyGPUs: 1, UnitsTotal: 200, UnitsFree: 140, Memory: Bytes(20 << 20), MemoryFree: Bytes(13 << 20)}) {
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
		s := Summarize([]GPU{{Memory: Bytes(tc.bytes), MemoryFree: Bytes(tc.bytes)}})
		if got := s.Memory.String(); got != tc.want || s.MemoryFree.String() != tc.want {
			t.Errorf("%d bytes: memory %s, memoryFree %s, want %s", tc.bytes, got, s.MemoryFree.String(), tc.want)
		}
	}
}

// A GPUNode stored in the v1alpha1 form (memory as integer bytes) reads back
// as v1alpha2 without its memory: it fails validation (the scheduler skips
// the node) until its agent rewrites the status.
func TestV1alpha1FormIsInvalid(t *testing.T) {
	old := `{"apiVersion":"gpuslice.io/v1alpha2","kind":"GPUNode","metadata":{"name":"n"},
	  "status":{"state":"Working","heartbeat":"2030-01-01T00:00:00Z","gpus":[{"index":0,"uuid":"a","memoryBytes":85899345920,
	  "memoryFreeBytes":85899345920,"unitsTotal":100,"unitsFree":100,"health":"Healthy"}]}}`
	var n GPUNode
	if err := json.Unmarshal([]byte(old), &n); err != nil {
		t.Fatal(err)
	}
	if err := n.Validate(); !errors.Is(err, ErrInvalidGPUNode) || !strings.Contains(err.Error(), "memory must be positive") {
		t.Fatalf("v1alpha1 form: %v, want invalid memory", err)
	}
	n.Status.GPUs[0].Memory = resource.MustParse("80Gi")
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
}

// Memory round-trips as a quantity in binary units.
func TestMemoryWireForm(t *testing.T) {
	g := GPU{Index: 0, UUID: "a", Memory: Bytes(80 << 30), MemoryFree: Bytes(81559<<20 + 1), UnitsTotal: 100, Health: GPUHealthy}
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, `"memory":"80Gi"`) || !strings.Contains(s, `"memoryFree":"85520809985"`) || strings.Contains(s, "memoryGuaranteed") {
		t.Fatalf("wire form %s", s)
	}
	var back GPU
	if err := json.Unmarshal(b, &back); err != nil || back.Memory.Value() != 80<<30 || back.MemoryFree.Value() != 81559<<20+1 {
		t.Fatalf("round trip %+v, %v", back, err)
	}
}
