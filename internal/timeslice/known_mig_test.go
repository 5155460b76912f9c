package timeslice

import (
	"errors"
	"slices"
	"testing"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/h100fake"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// The daemon knows each MIG instance of a GPU in MIG mode as a GPU of its
// own (the library gates per instance), besides the GPUs.
func TestGPUsOfMIG(t *testing.T) {
	s := h100fake.New(2, true)
	s.GPUs[1].MIGMode = 0
	n, m, err := s.Open()
	if err != nil {
		t.Fatal(err)
	}
	ps, err := m.MIGProfiles(0)
	if err != nil {
		t.Fatal(err)
	}
	in, err := m.CreateMIG(0, ps[3], ps[3].Placements[0])
	if err != nil {
		t.Fatal(err)
	}
	got, err := GPUsOf(n)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := proto.ParseUUID(in.UUID)
	if len(got) != 3 || got[1] != want {
		t.Fatalf("GPUsOf = %v, want both GPUs and %s", got, in.UUID)
	}
}

// migOverride is an NVML whose MIGInstances of some GPUs are replaced.
type migOverride struct {
	gpu.NVML
	gpu.MIG
	of map[int]func() ([]gpu.MIGInstance, error)
}

func (o migOverride) MIGInstances(index int) ([]gpu.MIGInstance, error) {
	if f, ok := o.of[index]; ok {
		return f()
	}
	return o.MIG.MIGInstances(index)
}

// One GPU whose MIG instances cannot be listed, or one instance whose UUID
// does not parse, costs those instances alone: the node's GPUs and the other
// GPU's instances are still known.
func TestGPUsOfMIGFaults(t *testing.T) {
	s := h100fake.New(2, true)
	n, m, err := s.Open()
	if err != nil {
		t.Fatal(err)
	}
	ps, err := m.MIGProfiles(0)
	if err != nil {
		t.Fatal(err)
	}
	var ins []gpu.MIGInstance
	for i := range 2 {
		in, err := m.CreateMIG(i, ps[3], ps[3].Placements[0])
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, in)
	}
	parse := func(s string) proto.UUID {
		u, err := proto.ParseUUID(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	g0, g1 := parse(s.GPUs[0].UUID), parse(s.GPUs[1].UUID)
	m0, m1 := parse(ins[0].UUID), parse(ins[1].UUID)
	for _, c := range []struct {
		name string
		of   map[int]func() ([]gpu.MIGInstance, error)
		want []proto.UUID
	}{
		{"all listed", nil, []proto.UUID{g0, m0, g1, m1}},
		{"GPU 0's instances fail", map[int]func() ([]gpu.MIGInstance, error){
			0: func() ([]gpu.MIGInstance, error) { return nil, errors.New("NVML: unknown error") },
		}, []proto.UUID{g0, g1, m1}},
		{"one UUID of GPU 1 does not parse", map[int]func() ([]gpu.MIGInstance, error){
			1: func() ([]gpu.MIGInstance, error) {
				bad := ins[1]
				bad.GI, bad.UUID = 9, "MIG-not-a-uuid"
				return []gpu.MIGInstance{bad, ins[1]}, nil
			},
		}, []proto.UUID{g0, m0, g1, m1}},
	} {
		got, err := GPUsOf(migOverride{NVML: n, MIG: m, of: c.of})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: GPUsOf = %v, want %v", c.name, got, c.want)
		}
	}
}
