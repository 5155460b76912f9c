package timeslice

import (
	"testing"

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
