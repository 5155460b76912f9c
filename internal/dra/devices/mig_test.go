package devices

import (
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/apis/resource"
	resourceinstall "k8s.io/kubernetes/pkg/apis/resource/install"
	"k8s.io/kubernetes/pkg/apis/resource/validation"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/gpu/h100fake"
	"github.com/gpuslice/gpuslice/internal/nodedev"
)

func h100MIG(t *testing.T, i int32) nodedev.MIGGPU {
	t.Helper()
	ps, err := h100fake.MIGProfiles()
	if err != nil {
		t.Fatal(err)
	}
	return nodedev.MIGGPU{GPU: nodedev.GPU{Index: i, UUID: "GPU-m" + string(rune('0'+i)), ProductName: "NVIDIA H100 80GB HBM3",
		MemoryTotal: h100fake.TotalMiB << 20, ComputeCapability: "9.0"}, Profiles: ps}
}

func TestBuildMIG(t *testing.T) {
	set, devs, err := BuildMIG(MIGGPU{GPU: h100MIG(t, 0), DriverVersion: "580.65.06", Units: 100})
	if err != nil {
		t.Fatal(err)
	}
	if set.Name != "gpu-0-mig" || len(set.Counters) != 9 || counterValue(set.Counters["compute-slices"]) != 7 {
		t.Fatalf("counter set %+v", set)
	}
	if len(devs) != 18 {
		t.Fatalf("%d devices, want 18", len(devs))
	}
	for _, d := range devs {
		if *d.Attributes[AttrMIGProfile].StringValue == "3g.40gb" {
			checkCap(t, d, CapacityMemory, 40192<<20, MemoryStep)
			checkCap(t, d, CapacityUnits, 100, 1)
			c := d.ConsumesCounters
			if len(c) != 1 || c[0].CounterSet != "gpu-0-mig" || counterValue(c[0].Counters["compute-slices"]) != 3 || len(c[0].Counters) != 5 {
				t.Errorf("%s consumes %+v", d.Name, c)
			}
		}
		if _, ok := d.Attributes[AttrUUID]; ok {
			t.Errorf("%s: an instance not made has a uuid", d.Name)
		}
	}
	if _, _, err := BuildMIG(MIGGPU{GPU: h100MIG(t, 0), Units: 1}); err == nil {
		t.Error("units total 1 accepted")
	}
}

// The slices the agent would publish for 9 MIG GPUs and 2 whole GPUs pass
// the API server's own validation (counter sets apart, at most 8 a slice,
// at most 64 devices a slice, counters that exist).
func TestMIGSlicesValidate(t *testing.T) {
	var sets []resourcev1.CounterSet
	var devs []resourcev1.Device
	whole, err := Build([]GPU{h100(9), h100(10)})
	if err != nil {
		t.Fatal(err)
	}
	devs = append(devs, whole...)
	for i := range int32(9) {
		s, d, err := BuildMIG(MIGGPU{GPU: h100MIG(t, i), Units: 100})
		if err != nil {
			t.Fatal(err)
		}
		sets, devs = append(sets, s), append(devs, d...)
	}
	slices := Slices(devs, sets)
	if len(slices) != 2+3 {
		t.Fatalf("%d slices, want 2 of counters and 3 of 164 devices", len(slices))
	}
	scheme := runtime.NewScheme()
	resourceinstall.Install(scheme)
	for i, s := range slices {
		v1 := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-gpuslice.io-" + string(rune('a'+i))},
			Spec: resourcev1.ResourceSliceSpec{Driver: "gpuslice.io", NodeName: ptr.To("node"),
				Pool:    resourcev1.ResourcePool{Name: "node", ResourceSliceCount: int64(len(slices))},
				Devices: s.Devices, SharedCounters: s.SharedCounters}}
		var in resource.ResourceSlice
		if err := scheme.Convert(v1, &in, nil); err != nil {
			t.Fatal(err)
		}
		if errs := validation.ValidateResourceSlice(&in); len(errs) > 0 {
			t.Errorf("slice %d: %v", i, errs.ToAggregate())
		}
	}
}

func counterValue(c resourcev1.Counter) int64 { return c.Value.Value() }
