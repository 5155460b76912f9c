package resize

import (
	"errors"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
)

func shareAssignment() *api.Assignment {
	return &api.Assignment{Version: api.AssignmentVersion, Node: "n1", Containers: []api.ContainerAssignment{
		{Name: "main", GPUs: []api.GPUAssignment{{Index: 0, UUID: "a", Units: 25, MemoryBytes: 1 << 30}}},
		{Name: "whole", GPUs: []api.GPUAssignment{{Index: 1, UUID: "b", Units: 100, MemoryBytes: 1 << 34, Exclusive: true}}},
	}}
}

func TestParseShareWant(t *testing.T) {
	a := shareAssignment()
	cases := map[string]struct {
		units, mem string
		want       map[string]ShareWant
		bad        bool
	}{
		"bare units":        {units: "50", want: map[string]ShareWant{"main": {Units: 50}}},
		"bare memory":       {mem: "2Gi", want: map[string]ShareWant{"main": {MemoryBytes: 2 << 30}}},
		"both by name":      {units: `{"main":40}`, mem: `{"main":"512Mi"}`, want: map[string]ShareWant{"main": {Units: 40, MemoryBytes: 512 << 20}}},
		"none":              {want: map[string]ShareWant{}},
		"whole container":   {units: `{"whole":50}`, bad: true},
		"unknown container": {units: `{"side":50}`, bad: true},
		"malformed":         {units: "fifty", bad: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseShareWant(tc.units, tc.mem, a)
			if tc.bad {
				if !errors.Is(err, ErrInvalidShareWant) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("got %v, %v", got, err)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("%s: got %+v want %+v", k, got[k], v)
				}
			}
		})
	}
	two := shareAssignment()
	two.Containers[1].GPUs[0].Exclusive = false
	if _, err := ParseShareWant("50", "", two); !errors.Is(err, ErrInvalidShareWant) {
		t.Fatalf("bare value with two share containers: %v", err)
	}
}

func TestPlanShares(t *testing.T) {
	a := shareAssignment()
	out, changed := PlanShares(a, map[string]ShareWant{"main": {Units: 50}})
	if !changed || out.Containers[0].GPUs[0].Units != 50 || out.Containers[0].GPUs[0].MemoryBytes != 1<<30 {
		t.Fatalf("25 -> 50: %+v %v", out, changed)
	}
	if a.Containers[0].GPUs[0].Units != 25 {
		t.Fatal("the plan changed its input")
	}
	if out.Containers[1].GPUs[0] != a.Containers[1].GPUs[0] {
		t.Fatal("the whole GPU changed")
	}
	if _, changed := PlanShares(a, map[string]ShareWant{"main": {Units: 25, MemoryBytes: 1 << 30}}); changed {
		t.Fatal("same share reported as a change")
	}
	out, changed = PlanShares(a, map[string]ShareWant{"main": {MemoryBytes: 256 << 20}})
	if !changed || out.Containers[0].GPUs[0].MemoryBytes != 256<<20 || out.Containers[0].GPUs[0].Units != 25 {
		t.Fatalf("memory shrink: %+v", out)
	}
}
