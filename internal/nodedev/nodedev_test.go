package nodedev

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/h100fake"
)

// h100 is an H100 80GB in MIG mode (a fake at NVML, read through internal/gpu).
func h100(t *testing.T) MIGGPU {
	t.Helper()
	ps, err := h100fake.MIGProfiles()
	if err != nil {
		t.Fatal(err)
	}
	return MIGGPU{GPU: GPU{Index: 0, UUID: "GPU-a", MemoryTotal: h100fake.TotalMiB << 20}, Profiles: ps}
}

func none(uint32) bool { return false }

func names(ms []MIG) map[string]bool {
	out := map[string]bool{}
	for _, m := range ms {
		out[m.Name()] = true
	}
	return out
}

func TestLayoutAndCounters(t *testing.T) {
	g := h100(t)
	if g.MemorySlices() != 8 || g.ComputeSlices() != 7 {
		t.Fatalf("slices %d/%d, want 8 memory, 7 compute", g.MemorySlices(), g.ComputeSlices())
	}
	all := Layout(g, none)
	if len(all) != 18 {
		t.Fatalf("%d devices on an empty H100, want 18 (7+4+3+2+1+1)", len(all))
	}
	c := Counters(g, none)
	if len(c) != 9 || c[CounterComputeSlices] != 7 || c["memory-slice-7"] != 1 {
		t.Fatalf("counters %v", c)
	}
	for _, m := range all {
		if m.Kind() != KindMIG || m.GPU().UUID != "GPU-a" || m.VisibleID() != "" {
			t.Errorf("%s: %v %v %q", m.Name(), m.Kind(), m.GPU(), m.VisibleID())
		}
		used := m.Consumes()
		if used[CounterComputeSlices] != int64(m.Profile.ComputeSlices) || int64(len(used)-1) != int64(m.Placement.Size) {
			t.Errorf("%s consumes %v", m.Name(), used)
		}
		for k := range used {
			if _, ok := c[k]; !ok {
				t.Errorf("%s consumes %s, which the GPU has not", m.Name(), k)
			}
		}
	}
	if !names(all)["gpu-0-mig-3g-40gb-4"] {
		t.Errorf("no gpu-0-mig-3g-40gb-4 in %v", names(all))
	}
}

// An admin's 3g.40gb at 4 (static): offered as it is, nothing over its
// slices, and the counters no longer hold its slices.
func TestLayoutStatic(t *testing.T) {
	g := h100(t)
	g.Instances = []gpu.MIGInstance{{ProfileID: 9, Placement: gpu.MIGPlacement{Start: 4, Size: 4}, GI: 2, HasCI: true, UUID: "MIG-x"},
		{ProfileID: 19, Placement: gpu.MIGPlacement{Start: 0, Size: 1}, GI: 7, HasCI: true, UUID: "MIG-ours"}}
	ours := func(gi uint32) bool { return gi == 7 }
	got := Layout(g, ours)
	n := names(got)
	for _, want := range []string{"gpu-0-mig-3g-40gb-4", "gpu-0-mig-3g-40gb-0", "gpu-0-mig-1g-10gb-3", "gpu-0-mig-1g-10gb-0"} {
		if !n[want] {
			t.Errorf("no %s in %v", want, n)
		}
	}
	for _, gone := range []string{"gpu-0-mig-1g-10gb-4", "gpu-0-mig-7g-80gb-0", "gpu-0-mig-1g-20gb-6", "gpu-0-mig-2g-20gb-4"} {
		if n[gone] {
			t.Errorf("%s overlaps the admin's instance, offered", gone)
		}
	}
	for _, m := range got {
		switch m.Name() {
		case "gpu-0-mig-3g-40gb-4":
			if !m.Static || m.VisibleID() != "MIG-x" || m.Consumes() != nil {
				t.Errorf("the admin's instance: %+v consumes %v", m, m.Consumes())
			}
		case "gpu-0-mig-1g-10gb-0":
			if m.Static || m.VisibleID() != "MIG-ours" || m.Consumes() == nil {
				t.Errorf("a claim's instance: %+v", m)
			}
		}
	}
	c := Counters(g, ours)
	if c[CounterComputeSlices] != 4 || len(c) != 5 {
		t.Errorf("counters %v, want 4 compute and memory slices 0-3", c)
	}
	// An admin's GPU instance without a compute instance: not offered, its slices held.
	g.Instances[0].HasCI = false
	n = names(Layout(g, ours))
	if n["gpu-0-mig-3g-40gb-4"] || n["gpu-0-mig-1g-10gb-5"] {
		t.Errorf("a half-made instance or its slices offered: %v", n)
	}
}

func TestMIGCapNodes(t *testing.T) {
	table := []byte("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu1/gi1/access 147\n" +
		"gpu1/gi1/ci0/access 148\ngpu0/gi2/access x\ngarbage\n")
	got := MIGCapNodes(table, 1, 1, 0)
	if len(got) != 2 || got[0] != "/dev/nvidia-caps/nvidia-cap147" || got[1] != "/dev/nvidia-caps/nvidia-cap148" {
		t.Fatalf("nodes %v", got)
	}
	if got := MIGCapNodes(table, 0, 2, 0); len(got) != 0 {
		t.Fatalf("a bad minor gave %v", got)
	}
	if got := MIGCapNodes(nil, 0, 1, 0); len(got) != 0 {
		t.Fatalf("no table gave %v", got)
	}
}

func FuzzMIGCapNodes(f *testing.F) {
	f.Add([]byte("gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"), uint32(0), uint32(1), uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, g, gi, ci uint32) {
		for _, n := range MIGCapNodes(b, g, gi, ci) {
			if !strings.HasPrefix(n, "/dev/nvidia-caps/nvidia-cap") || strings.ContainsAny(n[len("/dev/nvidia-caps/nvidia-cap"):], "/.") {
				t.Fatalf("node %q", n)
			}
		}
	})
}
