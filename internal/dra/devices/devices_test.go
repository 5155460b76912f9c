package devices

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/nodedev"
	"github.com/gpuslice/gpuslice/pkg/api"
)

func h100(i int32) GPU {
	return GPU{GPU: nodedev.GPU{Index: i, UUID: "GPU-0000000" + string(rune('0'+i)), ProductName: "NVIDIA H100 80GB HBM3",
		MemoryTotal: 80<<30 + 123, ComputeCapability: "9.0"}, DriverVersion: "580.65.06",
		Sharing: api.SharingTimeslice, Units: api.DefaultUnitsPerGPU}
}

func TestBuild(t *testing.T) {
	mps := h100(1)
	mps.Sharing, mps.Units = api.SharingMPS, 2*48*2
	mps.Taints = []resourceapi.DeviceTaint{{Key: "gpuslice.io/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	devs, err := Build([]GPU{h100(0), mps})
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[0].Name != "gpu-0" || devs[1].Name != "gpu-1" {
		t.Fatalf("devices %v", devs)
	}
	for i, d := range devs {
		if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
			t.Errorf("%s: not shareable", d.Name)
		}
		units := []int64{100, 192}[i]
		checkCap(t, d, CapacityUnits, units, 1)
		checkCap(t, d, CapacityMemory, 80<<30, MemoryStep) // rounded down to whole MiB
		a := d.Attributes
		if *a[AttrUUID].StringValue != []string{"GPU-00000000", "GPU-00000001"}[i] || *a[AttrIndex].IntValue != int64(i) ||
			*a[AttrMemory].IntValue != 80<<30+123 || *a[AttrProductName].StringValue != "NVIDIA H100 80GB HBM3" ||
			*a[AttrDriverVersion].VersionValue != "580.65.6" || *a[AttrComputeCapability].VersionValue != "9.0.0" ||
			*a[AttrSharing].StringValue != []string{"timeslice", "mps"}[i] {
			t.Errorf("%s: attributes %v", d.Name, a)
		}
		if len(a)+len(d.Capacity) > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
			t.Errorf("%s: %d attributes and capacities", d.Name, len(a)+len(d.Capacity))
		}
	}
	if len(devs[0].Taints) != 0 || len(devs[1].Taints) != 1 {
		t.Errorf("taints %v / %v", devs[0].Taints, devs[1].Taints)
	}
}

// checkCap: value total, default total (no request = the whole GPU), range
// [step, total] in steps of step, and every bound a multiple of the step.
func checkCap(t *testing.T, d resourceapi.Device, name resourceapi.QualifiedName, total, step int64) {
	t.Helper()
	c, ok := d.Capacity[name]
	if !ok || c.RequestPolicy == nil || c.RequestPolicy.ValidRange == nil {
		t.Fatalf("%s: capacity %s %+v", d.Name, name, c)
	}
	p, r := c.RequestPolicy, c.RequestPolicy.ValidRange
	if c.Value.Value() != total || p.Default.Value() != total || r.Min.Value() != step || r.Max.Value() != total ||
		r.Step.Value() != step || total%step != 0 || r.Min.Value()+r.Step.Value() > total {
		t.Errorf("%s %s: value %s default %s range [%s, %s] step %s", d.Name, name, &c.Value, p.Default, r.Min, r.Max, r.Step)
	}
}

func TestBuildRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*GPU)
		err  string
	}{
		{"no uuid", func(g *GPU) { g.UUID = "" }, "no UUID"},
		{"tiny memory", func(g *GPU) { g.MemoryTotal = 1 << 20 }, "memory"},
		{"no units", func(g *GPU) { g.Units = 0 }, "units total 0"},
		{"mode", func(g *GPU) { g.Sharing = "mig" }, "sharing mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := h100(0)
			tc.mod(&g)
			if _, err := Build([]GPU{g}); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Build = %v, want %q", err, tc.err)
			}
		})
	}
	if _, err := Build([]GPU{h100(0), h100(0)}); err == nil {
		t.Fatal("two GPUs with index 0 accepted")
	}
}

func TestSemver(t *testing.T) {
	for in, want := range map[string]string{"580.65.06": "580.65.6", "9.0": "9.0.0", "12": "12.0.0", "": "",
		"1.2.3.4": "", "a.b": "", "1..2": "", "8.": "", "-1.0": ""} {
		if got := semver(in); got != want {
			t.Errorf("semver(%q) = %q, want %q", in, got, want)
		}
	}
}
