package agent

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/dra"
	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/h100fake"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/internal/timeslice/timeslicetest"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// migParts is a node of two H100s (a fake at NVML), GPU 0 in MIG mode.
func migParts(t *testing.T) (*parts, *h100fake.Server) {
	t.Helper()
	s := h100fake.New(2, true)
	s.GPUs[1].MIGMode = 0
	n, _, err := s.Open()
	if err != nil {
		t.Fatal(err)
	}
	p := &parts{drv: &gpu.Driver{NVML: n, Version: "580.65.06"}, sh: &sharing{modes: map[string]api.SharingMode{}}}
	if p.gpus, p.found, err = discover(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	return p, s
}

// TestMIGSlices: GPU 0 (MIG mode) is offered as its 18 instances with a
// counter set, GPU 1 as a whole GPU; each device with its GPU's taints.
func TestMIGSlices(t *testing.T) {
	p, _ := migParts(t)
	mig, err := p.findMIG(context.Background(), filepath.Join(t.TempDir(), "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	gpus, devs, at := p.draGPUs(mig)
	if len(gpus) != 19 || len(devs) != 1 || devs[0].Index != 1 || at[0] != 1 {
		t.Fatalf("%d driver devices, %d whole GPUs %+v", len(gpus), len(devs), devs)
	}
	if g := gpus["gpu-0-mig-3g-40gb-4"]; g.MIG == nil || g.Units != 100 || g.MemoryBytes != 40192<<20 {
		t.Fatalf("gpu-0-mig-3g-40gb-4: %+v", g)
	}
	bad := []resourceapi.DeviceTaint{{Key: "gpuslice.io/unhealthy", Value: "xid-79", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	slices, names, byName, err := draDevices(mig, devs, at, [][]resourceapi.DeviceTaint{bad, nil})
	if err != nil {
		t.Fatal(err)
	}
	if len(slices) != 2 || len(slices[0].SharedCounters) != 1 || len(slices[1].Devices) != 19 {
		t.Fatalf("slices %+v", slices)
	}
	for i, n := range names {
		if strings.HasPrefix(n, "gpu-0-") != (len(byName[i]) == 1) {
			t.Errorf("device %s taints %v", n, byName[i])
		}
	}
	for _, d := range slices[1].Devices {
		if strings.HasPrefix(d.Name, "gpu-0-") != (len(d.Taints) == 1) {
			t.Errorf("published %s with taints %v", d.Name, d.Taints)
		}
	}
}

// An instance a claim made (recorded in the checkpoint) is offered as the
// claim's device, consuming counters; one the admin made is static.
func TestMIGOursAndStatic(t *testing.T) {
	p, s := migParts(t)
	m := p.drv.NVML.(gpu.MIG)
	ps, err := m.MIGProfiles(0)
	if err != nil {
		t.Fatal(err)
	}
	var p3 gpu.MIGProfile
	for _, x := range ps {
		if x.Name == "3g.40gb" {
			p3 = x
		}
	}
	for _, at := range p3.Placements {
		if _, err := m.CreateMIG(0, p3, at); err != nil {
			t.Fatal(err)
		}
	}
	ck := filepath.Join(t.TempDir(), "checkpoint.json")
	rec := &checkpoint.MIG{GPU: 0, ParentUUID: s.GPUs[0].UUID, Profile: "3g.40gb", ProfileID: p3.ID, Start: 4, Size: 4, OnDemand: true}
	if err := checkpoint.Save(ck, checkpoint.Data{Claims: map[string]checkpoint.Claim{"u1": {State: checkpoint.PrepareStarted,
		Devices: []checkpoint.Device{{Device: "gpu-0-mig-3g-40gb-4", MIG: rec}}}}}); err != nil {
		t.Fatal(err)
	}
	mig, err := p.findMIG(context.Background(), ck)
	if err != nil {
		t.Fatal(err)
	}
	gpus, _, _ := p.draGPUs(mig)
	if g := gpus["gpu-0-mig-3g-40gb-4"].MIG; g == nil || g.Static {
		t.Fatalf("the claim's instance: %+v", g)
	}
	if g := gpus["gpu-0-mig-3g-40gb-0"].MIG; g == nil || !g.Static {
		t.Fatalf("the admin's instance: %+v", g)
	}
	if _, ok := gpus["gpu-0-mig-1g-10gb-5"]; !ok {
		t.Error("a placement over the claim's instance is not offered (it is the counters' to refuse)")
	}
	if _, ok := gpus["gpu-0-mig-1g-10gb-1"]; ok {
		t.Error("a placement over the admin's instance is offered")
	}
}

// The metrics' view: each instance with who made it and the claims holding it.
func TestMIGInstancesMetrics(t *testing.T) {
	p, s := migParts(t)
	ctx := context.Background()
	ck := filepath.Join(t.TempDir(), "checkpoint.json")
	mig, err := p.findMIG(ctx, ck)
	if err != nil {
		t.Fatal(err)
	}
	gpus, _, _ := p.draGPUs(mig)
	run := t.TempDir()
	timeslicetest.Start(t, run)
	groups := groupmgr.New(groupmgr.Config{RunDir: run, Timeout: 5 * time.Second})
	d, err := dra.New(ctx, dra.Config{Pool: "node-a", GPUs: gpus, Groups: groups, CDIDir: t.TempDir(), Checkpoint: ck, MIG: mig.nvml,
		MIGMinors: filepath.Join(t.TempDir(), "none")})
	if err != nil {
		t.Fatal(err)
	}
	admin := gpus["gpu-0-mig-1g-10gb-6"].MIG
	if _, err := mig.nvml.CreateMIG(0, admin.Profile, admin.Placement); err != nil {
		t.Fatal(err)
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "a", UID: "u-a"}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "mig", Driver: dra.DriverName, Pool: "node-a", Device: "gpu-0-mig-3g-40gb-0"}}}}
	if _, err := d.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	got := mig.instances(ctx, d)
	if len(got) != 2 || s.Instances(0) != 2 {
		t.Fatalf("instances %+v", got)
	}
	for _, in := range got {
		want := map[string][2]any{"3g.40gb": {"claim", 1}, "1g.10gb": {"admin", 0}}[in.Profile]
		if in.MadeBy != want[0] || in.Claims != want[1] || !strings.HasPrefix(in.UUID, "MIG-") {
			t.Errorf("instance %+v, want %v", in, want)
		}
	}
}

// A GPU in MIG mode whose instances NVML cannot list is withheld (no whole
// GPU, no instance); one whose MIG mode NVML cannot tell is offered whole.
func TestMIGWithheld(t *testing.T) {
	p, s := migParts(t)
	s.GPUs[0].GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	s.GPUs[1].GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_GPU_IS_LOST }
	mig, err := p.findMIG(context.Background(), filepath.Join(t.TempDir(), "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	gpus, devs, _ := p.draGPUs(mig)
	if len(gpus) != 1 || len(devs) != 1 || devs[0].Index != 1 {
		t.Fatalf("devices %v / whole %+v: want gpu-1 alone", gpus, devs)
	}
}
