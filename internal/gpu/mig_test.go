package gpu_test

import (
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/h100fake"
)

func TestMIGProfileName(t *testing.T) {
	for _, c := range []struct {
		slices uint32
		mem    uint64
		want   string
	}{
		{1, 9856, "1g.10gb"}, {1, 19968, "1g.20gb"}, {2, 19968, "2g.20gb"}, {3, 40192, "3g.40gb"},
		{4, 40192, "4g.40gb"}, {7, 80896, "7g.80gb"},
	} {
		if got := gpu.MIGProfileName(c.slices, c.mem, h100fake.TotalMiB); got != c.want {
			t.Errorf("MIGProfileName(%d, %d) = %q, want %q", c.slices, c.mem, got, c.want)
		}
	}
	if got := gpu.MIGProfileName(1, 5000, 0); got != "1g.5gb" {
		t.Errorf("without a total: %q", got)
	}
}

func migOf(t *testing.T, s *h100fake.Server) gpu.MIG {
	t.Helper()
	_, m, err := s.Open()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMIGProfilesOfAnH100(t *testing.T) {
	m := migOf(t, h100fake.New(1, true))
	on, pending, err := m.MIGMode(0)
	if err != nil || !on || !pending {
		t.Fatalf("MIGMode = %v %v %v, want on", on, pending, err)
	}
	ps, err := m.MIGProfiles(0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}
	if len(ps) != len(want) {
		t.Fatalf("%d profiles %+v, want %d (no +me)", len(ps), ps, len(want))
	}
	for _, p := range ps {
		if len(p.Placements) != want[p.Name] {
			t.Errorf("%s: %d placements, want %d", p.Name, len(p.Placements), want[p.Name])
		}
	}
}

func profile(t *testing.T, m gpu.MIG, name string) gpu.MIGProfile {
	t.Helper()
	ps, err := m.MIGProfiles(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no profile %s", name)
	return gpu.MIGProfile{}
}

func TestCreateListDestroyMIG(t *testing.T) {
	s := h100fake.New(1, true)
	m := migOf(t, s)
	p := profile(t, m, "3g.40gb")
	a, err := m.CreateMIG(0, p, p.Placements[1])
	if err != nil {
		t.Fatal(err)
	}
	if !a.HasCI || a.UUID == "" || a.Placement.Start != 4 || a.MemoryBytes != 40192<<20 || a.ProfileID != p.ID {
		t.Fatalf("made %+v", a)
	}
	if _, err := m.CreateMIG(0, p, p.Placements[1]); !errors.Is(err, gpu.ErrNVML) {
		t.Fatalf("a second instance on the same slices: %v, want an NVML error", err)
	}
	b, err := m.CreateMIG(0, p, p.Placements[0])
	if err != nil || b.UUID == a.UUID {
		t.Fatalf("second 3g.40gb: %+v %v", b, err)
	}
	list, err := m.MIGInstances(0)
	if err != nil || len(list) != 2 {
		t.Fatalf("MIGInstances = %+v, %v", list, err)
	}
	if err := m.DestroyMIG(0, a.GI); err != nil {
		t.Fatal(err)
	}
	if err := m.DestroyMIG(0, a.GI); err != nil {
		t.Fatalf("destroying a destroyed instance: %v (want none)", err)
	}
	if n := s.Instances(0); n != 1 {
		t.Fatalf("%d instances left, want 1", n)
	}
}

// A compute instance that cannot be made leaves no GPU instance behind.
func TestCreateMIGNothingHalfMade(t *testing.T) {
	s := h100fake.New(1, true)
	m := migOf(t, s)
	s.FailCI = nvml.ERROR_INSUFFICIENT_RESOURCES
	p := profile(t, m, "1g.20gb")
	if _, err := m.CreateMIG(0, p, p.Placements[0]); err == nil {
		t.Fatal("made without a compute instance")
	}
	if n := s.Instances(0); n != 0 {
		t.Fatalf("%d GPU instances left half made", n)
	}
}

// A MIG device that cannot be described after its compute instance was made
// leaves neither the compute instance nor the GPU instance behind.
func TestCreateMIGNothingHalfMadeAfterComputeInstance(t *testing.T) {
	s := h100fake.New(1, true)
	m := migOf(t, s)
	s.FailMIGUUID = nvml.ERROR_UNKNOWN
	p := profile(t, m, "1g.20gb")
	if _, err := m.CreateMIG(0, p, p.Placements[0]); err == nil {
		t.Fatal("made though its MIG device has no UUID")
	}
	if c := s.Calls["CreateComputeInstance"]; c != 1 {
		t.Fatalf("CreateComputeInstance called %d times, want 1", c)
	}
	if n := s.Instances(0); n != 0 {
		t.Fatalf("%d GPU instances left half made", n)
	}
	s.FailMIGUUID = 0
	if _, err := m.CreateMIG(0, p, p.Placements[0]); err != nil {
		t.Fatalf("the placement is not free again: %v", err)
	}
}

func TestMIGModeOff(t *testing.T) {
	m := migOf(t, h100fake.New(1, false))
	on, _, err := m.MIGMode(0)
	if err != nil || on {
		t.Fatalf("MIGMode = %v %v, want off", on, err)
	}
}

// GPUIndex finds a GPU by its UUID where it is now; a UUID no GPU has is
// ErrNoGPU.
func TestGPUIndex(t *testing.T) {
	s := h100fake.New(2, true)
	m := migOf(t, s)
	u := s.GPUs[1].UUID
	s.Insert(0)
	if i, err := m.GPUIndex(u); err != nil || i != 2 {
		t.Fatalf("GPUIndex(%s) = %d %v after a GPU was added before it, want 2", u, i, err)
	}
	if _, err := m.GPUIndex("GPU-ffffffff-0000-0000-0000-000000000000"); !errors.Is(err, gpu.ErrNoGPU) {
		t.Fatalf("GPUIndex of no GPU: %v, want ErrNoGPU", err)
	}
}
