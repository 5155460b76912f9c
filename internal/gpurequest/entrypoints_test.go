package gpurequest_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/cli"
	"github.com/gpuslice/gpuslice/internal/dra"
	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/pkg/api"
)

const gib = int64(1) << 30

// part is a request's part of one GPU of total units and 16 GiB: units
// (whole: the whole GPU) and memory bytes (0: none asked).
type part struct {
	units, total, memory int64
	whole                bool
}

// One request, as each entry point takes it: gpuslice run's flags, a pod's
// device-plugin assignment (parts) and annotations, a DRA claim consuming
// parts with a GPUShareConfig (fields after apiVersion and kind).
type request struct {
	name  string
	parts []part
	flags []string
	ann   map[string]string
	cfg   string
	want  group.Settings
	bad   bool // every entry point refuses it
}

// TestEntryPointsTranslateAlike feeds the same request through gpuslice
// run (cli.RunSettings), the device-plugin path (agent.ContainerSettings) and
// the DRA driver (dra.ClaimSettings): each gets the same group settings.
// Before gpurequest owned the translation, "a third of an MPS GPU" failed for
// DRA (share 0.3333333333333333: not rounded as the share file holds it) and
// "all the units" for the device-plugin path (share 100 %, the slice dropped;
// DRA: the whole GPU, the slice kept).
func TestEntryPointsTranslateAlike(t *testing.T) {
	for _, r := range []request{
		{name: "a quarter with memory", parts: []part{{units: 25, total: 100, memory: 4 * gib}},
			flags: []string{"--share", "25%", "--memory", "4GiB"},
			want:  group.Settings{Share: 0.25, MemoryMax: uint64(4 * gib), Priority: policy.Low}},
		{name: "a third of an MPS GPU", parts: []part{{units: 64, total: 192}},
			flags: []string{"--share", "33.3333%"}, want: group.Settings{Share: 0.333333, Priority: policy.Low}},
		{name: "all the units: the whole GPU's time", parts: []part{{units: 100, total: 100}},
			flags: []string{"--slice", "5ms"}, ann: map[string]string{api.AnnotationSlice: "5ms"}, cfg: `"slice":"5ms"`,
			want: group.Settings{Slice: 5 * time.Millisecond, Priority: policy.Low}},
		{name: "whole GPU, high, slice, memory", parts: []part{{whole: true, total: 100, memory: 6 * gib}},
			flags: []string{"--priority", "high", "--slice", "20ms", "--memory", "6GiB"},
			ann:   map[string]string{api.AnnotationPriority: "high", api.AnnotationSlice: "20ms"}, cfg: `"priority":"high","slice":"20ms"`,
			want: group.Settings{Slice: 20 * time.Millisecond, MemoryMax: uint64(6 * gib), Priority: policy.High}},
		{name: "elastic, spill and a ceiling", parts: []part{{units: 50, total: 100, memory: 6 * gib}},
			flags: []string{"--share", "50%", "--memory", "6GiB", "--memory-max", "20GiB", "--spill", "host", "--share-max", "80%"},
			ann:   map[string]string{api.AnnotationMemoryMax: "20Gi", api.AnnotationMemorySpill: "host", api.AnnotationShareMax: "80%"},
			cfg:   `"memoryCeiling":"20Gi","spill":true,"shareCeiling":80`,
			want: group.Settings{Share: 0.5, ShareMax: 0.8, MemoryMin: uint64(6 * gib), MemoryMax: uint64(20 * gib), MemorySpill: true,
				Priority: policy.Low}},
		{name: "two GPUs: the smallest share and memory", parts: []part{{units: 30, total: 100, memory: 2 * gib},
			{units: 20, total: 100, memory: 3 * gib}}, flags: []string{"--share", "20%", "--memory", "2GiB"},
			want: group.Settings{Share: 0.2, MemoryMax: uint64(2 * gib), Priority: policy.Low}},
		{name: "elastic ceiling below the guarantee", parts: []part{{units: 50, total: 100, memory: 6 * gib}},
			flags: []string{"--share", "50%", "--memory", "6GiB", "--memory-max", "4GiB"},
			ann:   map[string]string{api.AnnotationMemoryMax: "4Gi"}, cfg: `"memoryCeiling":"4Gi"`, bad: true},
	} {
		t.Run(r.name, func(t *testing.T) {
			for _, e := range []struct {
				name string
				do   func(request) (group.Settings, error)
			}{{"gpuslice run", viaRun}, {"device plugin", viaPod}, {"DRA", viaClaim}} {
				got, err := e.do(r)
				switch {
				case r.bad && err == nil:
					t.Errorf("%s: %+v, want an error", e.name, got)
				case !r.bad && (err != nil || got != r.want):
					t.Errorf("%s: %+v %v, want %+v", e.name, got, err, r.want)
				}
			}
		})
	}
}

func viaRun(r request) (group.Settings, error) {
	return cli.RunSettings(append(append([]string{}, r.flags...), "--", "app"))
}

func viaPod(r request) (group.Settings, error) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: r.ann}}
	var gpus []api.GPUAssignment
	totals := map[string]int64{}
	for i, p := range r.parts {
		uuid := fmt.Sprintf("GPU-%d", i)
		totals[uuid] = p.total
		g := api.GPUAssignment{Index: int32(i), UUID: uuid, Units: p.units, MemoryBytes: p.memory, Exclusive: p.whole}
		if p.whole {
			g.Units = p.total
		}
		gpus = append(gpus, g)
	}
	return agent.ContainerSettings(pod, gpus, func(uuid string) int64 { return totals[uuid] })
}

func viaClaim(r request) (group.Settings, error) {
	gpus := map[string]dra.GPU{}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "c", UID: "u"}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for i, p := range r.parts {
		dev := fmt.Sprintf("gpu-%d", i)
		gpus[dev] = dra.GPU{UUID: fmt.Sprintf("GPU-%d", i), MemoryBytes: 16 * gib, Units: p.total}
		units, mem := p.units, p.memory
		if p.whole {
			units = p.total
		}
		if mem == 0 {
			mem = 16 * gib
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "gpu", Driver: dra.DriverName, Pool: "node-a", Device: dev,
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
				devices.CapacityUnits:  *resource.NewQuantity(units, resource.DecimalSI),
				devices.CapacityMemory: *resource.NewQuantity(mem, resource.BinarySI)}})
	}
	if r.cfg != "" {
		raw := `{"apiVersion":"gpuslice.io/v1alpha1","kind":"GPUShareConfig",` + r.cfg + `}`
		c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{
			Source: resourceapi.AllocationConfigSourceClaim, DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: dra.DriverName, Parameters: runtime.RawExtension{Raw: []byte(raw)}}}}}
	}
	return dra.ClaimSettings(c, "node-a", gpus)
}
