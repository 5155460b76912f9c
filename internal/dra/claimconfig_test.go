package dra

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/dra/devices"
	drav1 "github.com/gpuslice/gpuslice/pkg/apis/dra/v1alpha1"
)

// cfgEntry is an opaque configuration of this driver from src naming requests.
func cfgEntry(src resourceapi.AllocationConfigSource, raw string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: src, Requests: requests, DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: DriverName, Parameters: runtime.RawExtension{Raw: []byte(raw)}}}}
}

// shareResult is request's 25 units and 1 GiB of dev.
func shareResult(request, dev string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: DriverName, Pool: "node-a", Device: dev,
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
			devices.CapacityUnits: *resource.NewQuantity(25, resource.DecimalSI), devices.CapacityMemory: *resource.NewQuantity(gib, resource.BinarySI)}}
}

// TestConfigPerRequest: a configuration applies to the requests it names
// (none: all; a request's name: its subrequests too), the class's before the
// claim's whatever their order in the allocation, the last that applies wins
// per request; the claim's group takes its requests' one configuration, and
// requests configured differently are refused naming both.
func TestConfigPerRequest(t *testing.T) {
	const (
		high    = cfgHead + `,"priority":"high"}`
		ceil50  = cfgHead + `,"shareCeiling":50}`
		badJSON = cfgHead + `,"shares":1}`
	)
	class, claimSrc := resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim
	gpus := newEnvGPUs()
	for _, tc := range []struct {
		name     string
		results  []resourceapi.DeviceRequestAllocationResult
		configs  []resourceapi.DeviceAllocationConfiguration
		priority string
		ceiling  float64
		err      string
	}{
		{name: "none", results: []resourceapi.DeviceRequestAllocationResult{shareResult("gpu", "gpu-0")}, priority: "low"},
		{name: "class for all", results: []resourceapi.DeviceRequestAllocationResult{shareResult("gpu", "gpu-0")},
			configs: []resourceapi.DeviceAllocationConfiguration{cfgEntry(class, high)}, priority: "high"},
		{name: "claim after class, whatever the order", results: []resourceapi.DeviceRequestAllocationResult{shareResult("gpu", "gpu-0")},
			configs:  []resourceapi.DeviceAllocationConfiguration{cfgEntry(claimSrc, ceil50, "gpu"), cfgEntry(class, high, "gpu")},
			priority: "low", ceiling: 0.5},
		{name: "naming another request only", results: []resourceapi.DeviceRequestAllocationResult{shareResult("gpu", "gpu-0")},
			configs: []resourceapi.DeviceAllocationConfiguration{cfgEntry(claimSrc, high, "nic")}, priority: "low"},
		{name: "the last that applies", results: []resourceapi.DeviceRequestAllocationResult{shareResult("gpu", "gpu-0")},
			configs: []resourceapi.DeviceAllocationConfiguration{cfgEntry(claimSrc, high, "gpu"), cfgEntry(claimSrc, ceil50, "other"),
				cfgEntry(claimSrc, ceil50)}, priority: "low", ceiling: 0.5},
		{name: "subrequest of a named request", results: []resourceapi.DeviceRequestAllocationResult{shareResult("gpu/quarter", "gpu-0")},
			configs: []resourceapi.DeviceAllocationConfiguration{cfgEntry(claimSrc, high, "gpu")}, priority: "high"},
		{name: "subrequest named", results: []resourceapi.DeviceRequestAllocationResult{shareResult("gpu/quarter", "gpu-0")},
			configs:  []resourceapi.DeviceAllocationConfiguration{cfgEntry(claimSrc, high, "gpu/half"), cfgEntry(claimSrc, ceil50, "gpu/quarter")},
			priority: "low", ceiling: 0.5},
		{name: "two requests alike", results: []resourceapi.DeviceRequestAllocationResult{shareResult("a", "gpu-0"), shareResult("b", "gpu-1")},
			configs: []resourceapi.DeviceAllocationConfiguration{cfgEntry(claimSrc, high, "a"), cfgEntry(claimSrc, high, "b")}, priority: "high"},
		{name: "two requests configured differently", results: []resourceapi.DeviceRequestAllocationResult{shareResult("a", "gpu-0"), shareResult("b", "gpu-1")},
			configs: []resourceapi.DeviceAllocationConfiguration{cfgEntry(class, high), cfgEntry(claimSrc, ceil50, "b")},
			err:     "requests a and b are configured differently"},
		{name: "a bad one naming another request", results: []resourceapi.DeviceRequestAllocationResult{shareResult("gpu", "gpu-0")},
			configs: []resourceapi.DeviceAllocationConfiguration{cfgEntry(claimSrc, badJSON, "nic")}, err: `unknown field "shares"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := claim("u", 0, 0)
			c.Status.Allocation.Devices.Results = tc.results
			c.Status.Allocation.Devices.Config = tc.configs
			p, err := planClaim(c, "node-a", gpus)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("planClaim = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.settings.Priority.String() != tc.priority || p.settings.ShareMax != tc.ceiling {
				t.Fatalf("settings %+v, want priority %s ceiling %v", p.settings, tc.priority, tc.ceiling)
			}
		})
	}
	// The live change (annotation) stands for every request.
	c := claim("u", 0, 0)
	c.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{shareResult("a", "gpu-0"), shareResult("b", "gpu-1")}
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{cfgEntry(claimSrc, ceil50, "b")}
	c.Annotations = map[string]string{drav1.ShareConfigAnnotation: high}
	if p, err := planClaim(c, "node-a", gpus); err != nil || p.settings.Priority.String() != "high" || p.settings.ShareMax != 0 {
		t.Fatalf("annotated: %+v %v", p.settings, err)
	}
}

func newEnvGPUs() map[string]GPU {
	return map[string]GPU{
		"gpu-0": {UUID: "GPU-aaaa", Minor: 0, MemoryBytes: 16 * gib, Units: 100, Healthy: true},
		"gpu-1": {UUID: "GPU-bbbb", Minor: 1, MemoryBytes: 16 * gib, Units: 100, Healthy: true},
	}
}

// TestAdminAccess: a claim of admin-access devices gets them without a
// group: its CDI spec has the GPU's node and no library, preload, group or
// daemon socket; its entry says admin access; Unprepare removes the spec. A
// claim mixing admin and tenant requests is refused naming both.
func TestAdminAccess(t *testing.T) {
	e := newEnv(t)
	d, err := New(context.Background(), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	yes := true
	c := claim("0b9c3f2e-0000-4000-8000-0000000000cc", 0, 0, cfgHead+`,"priority":"high"}`)
	c.Status.Allocation.Devices.Results[0].AdminAccess = &yes
	devs, err := d.Prepare(ctx, c)
	if err != nil || len(devs) != 1 {
		t.Fatalf("Prepare: %v %v", devs, err)
	}
	if l, _ := e.mgr.List(); len(l) != 0 {
		t.Fatalf("an admin-access claim made groups %v", l)
	}
	ent := d.Prepared()[string(c.UID)]
	if ent.Group != "" || ent.State != checkpoint.PrepareCompleted || !ent.Devices[0].AdminAccess {
		t.Fatalf("entry %+v", ent)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(e.cdi), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	dev := cache.GetDevice("gpuslice.io/claim=" + string(c.UID))
	if dev == nil {
		t.Fatalf("no CDI device: %v", cache.GetErrors())
	}
	ed := dev.ContainerEdits
	if len(ed.DeviceNodes) != 1 || ed.DeviceNodes[0].Path != "/dev/nvidia0" {
		t.Fatalf("device nodes %+v", ed.DeviceNodes)
	}
	for _, m := range ed.Mounts {
		if strings.Contains(m.ContainerPath, "ld.so.preload") || strings.Contains(m.HostPath, e.run) {
			t.Errorf("admin access mounts %s", m.ContainerPath)
		}
	}
	for _, v := range ed.Env {
		if strings.HasPrefix(v, "LD_PRELOAD=") || strings.HasPrefix(v, "GPUSLICE_GROUP") || strings.HasPrefix(v, "GPUSLICE_NODE_SOCKET") {
			t.Errorf("admin access env %s", v)
		}
	}
	if err := d.Unprepare(ctx, c.UID); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(e.cdi); len(ents) != 0 {
		t.Fatalf("CDI specs left: %v", ents)
	}
	mixed := claim("0b9c3f2e-0000-4000-8000-0000000000dd", 25, gib)
	admin := shareResult("monitor", "gpu-1")
	admin.AdminAccess = &yes
	mixed.Status.Allocation.Devices.Results = append(mixed.Status.Allocation.Devices.Results, admin)
	if _, err := d.Prepare(ctx, mixed); err == nil || !strings.Contains(err.Error(), "requests monitor with adminAccess and gpu without") {
		t.Fatalf("mixed claim: %v", err)
	}
	if len(d.Prepared()) != 0 {
		t.Fatal("a refused claim in the checkpoint")
	}
}

// TestRequestsOwnCDIDevices: a claim of two requests has a CDI device per
// request holding that request's GPU alone (a container naming one request
// gets its GPU, not the other's), both in the claim's group; a claim of one
// request keeps the one device named by its UID.
func TestRequestsOwnCDIDevices(t *testing.T) {
	e := newEnv(t)
	d, err := New(context.Background(), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := claim("0b9c3f2e-0000-4000-8000-0000000000ee", 0, 0)
	c.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{shareResult("a", "gpu-0"), shareResult("b/small", "gpu-1")}
	devs, err := d.Prepare(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"gpu-0": "gpuslice.io/claim=" + string(c.UID) + "_a", "gpu-1": "gpuslice.io/claim=" + string(c.UID) + "_b"}
	for _, dv := range devs {
		if len(dv.CDIDeviceIDs) != 1 || dv.CDIDeviceIDs[0] != want[dv.DeviceName] {
			t.Fatalf("device %s: CDI %v, want %s", dv.DeviceName, dv.CDIDeviceIDs, want[dv.DeviceName])
		}
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(e.cdi), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	for dev, node := range map[string]string{"gpu-0": "/dev/nvidia0", "gpu-1": "/dev/nvidia1"} {
		cd := cache.GetDevice(want[dev])
		if cd == nil {
			t.Fatalf("no CDI device %s: %v", want[dev], cache.GetErrors())
		}
		ed := cd.ContainerEdits
		if len(ed.DeviceNodes) != 1 || ed.DeviceNodes[0].Path != node {
			t.Errorf("%s: device nodes %+v, want %s alone", want[dev], ed.DeviceNodes, node)
		}
		if !slices.Contains(ed.Env, "GPUSLICE_GROUP="+GroupName(c.UID)) {
			t.Errorf("%s: env %v", want[dev], ed.Env)
		}
	}
	one := claim("0b9c3f2e-0000-4000-8000-0000000000ef", 25, gib)
	devs, err = d.Prepare(context.Background(), one)
	if err != nil || devs[0].CDIDeviceIDs[0] != "gpuslice.io/claim="+string(one.UID) {
		t.Fatalf("one request: %+v %v", devs, err)
	}
}
