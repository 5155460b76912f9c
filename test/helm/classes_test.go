//go:build helmchart

package helm

import (
	"context"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/nodedev"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// TestDeviceClassesSelect: each DeviceClass the chart renders, its CEL
// compiled and run as the scheduler does, against the devices the agent
// publishes: the whole-GPU and share classes never select a MIG instance,
// mig.gpuslice.io selects every one, mig-<profile> exactly its profile's.
func TestDeviceClassesSelect(t *testing.T) {
	whole, err := devices.Build([]devices.GPU{{GPU: nodedev.GPU{Index: 1, UUID: "GPU-1", MemoryTotal: 80 << 30}, Sharing: api.SharingTimeslice, Units: 100}})
	if err != nil {
		t.Fatal(err)
	}
	p := func(name string, slices uint32, mem uint64, starts ...uint32) gpu.MIGProfile {
		out := gpu.MIGProfile{Name: name, ID: slices*10 + uint32(mem>>10), ComputeSlices: slices, MemoryMiB: mem}
		for _, s := range starts {
			out.Placements = append(out.Placements, gpu.MIGPlacement{Start: s, Size: uint32(mem / 9856)})
		}
		return out
	}
	_, mig, err := devices.BuildMIG(devices.MIGGPU{Units: 100, GPU: nodedev.MIGGPU{GPU: nodedev.GPU{UUID: "GPU-0", MemoryTotal: 80 << 30},
		Profiles: []gpu.MIGProfile{p("1g.10gb", 1, 9856, 0, 1), p("3g.40gb", 3, 40192, 4)}}})
	if err != nil {
		t.Fatal(err)
	}
	classes := map[string]*resourcev1.DeviceClass{}
	for _, doc := range strings.Split(render(t, ""), "\n---\n") {
		if !strings.Contains(doc, "kind: DeviceClass") {
			continue
		}
		var c resourcev1.DeviceClass
		if err := yaml.UnmarshalStrict([]byte(doc), &c); err != nil {
			t.Fatal(err)
		}
		classes[c.Name] = &c
	}
	want := map[string]func(d resourcev1.Device) bool{
		devices.ClassWhole:                 func(d resourcev1.Device) bool { return d.Name == "gpu-1" },
		devices.ClassShare:                 func(d resourcev1.Device) bool { return d.Name == "gpu-1" },
		devices.ClassMIG:                   func(d resourcev1.Device) bool { return d.Name != "gpu-1" },
		devices.ClassMIGProfile("1g.10gb"): func(d resourcev1.Device) bool { return strings.Contains(d.Name, "-1g-10gb-") },
		devices.ClassMIGProfile("3g.40gb"): func(d resourcev1.Device) bool { return strings.Contains(d.Name, "-3g-40gb-") },
		devices.ClassMIGProfile("7g.80gb"): func(resourcev1.Device) bool { return false },
	}
	for name, sel := range want {
		c, ok := classes[name]
		if !ok {
			t.Fatalf("no DeviceClass %s in %v", name, classes)
		}
		for _, d := range append(append([]resourcev1.Device{}, whole...), mig...) {
			if got := selects(t, c, d); got != sel(d) {
				t.Errorf("class %s selects %s: %v, want %v", name, d.Name, got, sel(d))
			}
		}
	}
}

func selects(t *testing.T, c *resourcev1.DeviceClass, d resourcev1.Device) bool {
	t.Helper()
	comp := cel.GetCompiler(cel.Features{EnableConsumableCapacity: true})
	for _, s := range c.Spec.Selectors {
		r := comp.CompileCELExpression(s.CEL.Expression, cel.Options{})
		if r.Error != nil {
			t.Fatalf("class %s: %v", c.Name, r.Error)
		}
		ok, _, err := r.DeviceMatches(context.Background(), cel.Device{Driver: "gpuslice.io", Attributes: d.Attributes,
			Capacity: d.Capacity, AllowMultipleAllocations: d.AllowMultipleAllocations})
		if err != nil {
			t.Fatalf("class %s on %s: %v", c.Name, d.Name, err)
		}
		if !ok {
			return false
		}
	}
	return true
}
