package dra

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/h100fake"
	"github.com/gpuslice/gpuslice/internal/gpucdi"
	"github.com/gpuslice/gpuslice/internal/nodedev"
)

// migEnv is a driver environment whose GPU 0 is an H100 80GB in MIG mode
// (a fake at NVML): one device per profile and placement, as published.
func migEnv(t *testing.T) (env, *h100fake.Server, gpu.MIG) {
	t.Helper()
	e := newEnv(t)
	s := h100fake.New(1, true)
	_, m, err := s.Open()
	if err != nil {
		t.Fatal(err)
	}
	ps, err := m.MIGProfiles(0)
	if err != nil {
		t.Fatal(err)
	}
	g := nodedev.MIGGPU{GPU: nodedev.GPU{Index: 0, UUID: s.GPUs[0].UUID, MemoryTotal: h100fake.TotalMiB << 20}, Profiles: ps}
	e.cfg.GPUs = map[string]GPU{}
	for _, slot := range nodedev.Layout(g, func(uint32) bool { return false }) {
		e.cfg.GPUs[slot.Name()] = GPU{UUID: slot.Parent.UUID, Minor: 0, MemoryBytes: slot.MemoryBytes() / devices.MemoryStep * devices.MemoryStep,
			Units: 100, Healthy: true, MIG: &slot}
	}
	e.cfg.MIG = m
	e.cfg.MIGMinors = filepath.Join(t.TempDir(), "mig-minors") // none: the simulator's and a test's case
	return e, s, m
}

// migClaim asks for units of the device (0: all of it).
func migClaim(uid, device string, units int64, mem int64) *resourceapi.ResourceClaim {
	r := resourceapi.DeviceRequestAllocationResult{Request: "mig", Driver: DriverName, Pool: "node-a", Device: device}
	if units > 0 {
		id := types.UID("share-" + uid)
		r.ShareID = &id
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
			devices.CapacityUnits: *resource.NewQuantity(units, resource.DecimalSI), devices.CapacityMemory: *resource.NewQuantity(mem, resource.BinarySI)}
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "c-" + uid, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{r}}}
	return c
}

// visible is the claim's CDI CUDA_VISIBLE_DEVICES.
func visible(t *testing.T, e env, uid string) string {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(e.cdi), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	dev := cache.GetDevice(gpucdi.ClaimKind + "=" + uid)
	if dev == nil {
		t.Fatalf("no CDI device for claim %s: %v", uid, cache.GetErrors())
	}
	for _, v := range dev.ContainerEdits.Env {
		if s, ok := strings.CutPrefix(v, "CUDA_VISIBLE_DEVICES="); ok {
			return s
		}
	}
	return ""
}

func TestPrepareMIGOnDemand(t *testing.T) {
	e, s, _ := migEnv(t)
	ctx := context.Background()
	d, err := New(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := migClaim("0b9c3f2e-0000-4000-8000-00000000a001", "gpu-0-mig-3g-40gb-0", 0, 0)
	b := migClaim("0b9c3f2e-0000-4000-8000-00000000a002", "gpu-0-mig-3g-40gb-4", 0, 0)
	for _, c := range []*resourceapi.ResourceClaim{a, b} {
		if _, err := d.Prepare(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Instances(0); n != 2 {
		t.Fatalf("%d instances made, want 2", n)
	}
	va, vb := visible(t, e, string(a.UID)), visible(t, e, string(b.UID))
	if !strings.HasPrefix(va, "MIG-") || !strings.HasPrefix(vb, "MIG-") || va == vb {
		t.Fatalf("CUDA_VISIBLE_DEVICES %q and %q, want two MIG instances", va, vb)
	}
	ck := d.Prepared()[string(a.UID)]
	if m := ck.Devices[0].MIG; m == nil || !m.OnDemand || m.UUID != va || ck.Devices[0].UUID != va {
		t.Fatalf("checkpoint %+v", ck.Devices[0])
	}
	// Idempotent: a second Prepare makes nothing.
	if _, err := d.Prepare(ctx, a); err != nil || s.Calls["CreateGpuInstanceWithPlacement"] != 2 {
		t.Fatalf("again: %v, %d creates", err, s.Calls["CreateGpuInstanceWithPlacement"])
	}
	for _, c := range []*resourceapi.ResourceClaim{a, b} {
		if err := d.Unprepare(ctx, c.UID); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Instances(0); n != 0 {
		t.Fatalf("%d instances left after Unprepare, want 0", n)
	}
}

// Two claims share one 1g.20gb instance, 25 and 75 units: one instance
// made, each claim's group its share; destroyed when the last goes.
func TestMIGShareInsideInstance(t *testing.T) {
	e, s, _ := migEnv(t)
	ctx := context.Background()
	d, err := New(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := migClaim("0b9c3f2e-0000-4000-8000-00000000b001", "gpu-0-mig-1g-20gb-2", 25, 4*gib)
	b := migClaim("0b9c3f2e-0000-4000-8000-00000000b002", "gpu-0-mig-1g-20gb-2", 75, 12*gib)
	for _, c := range []*resourceapi.ResourceClaim{a, b} {
		if _, err := d.Prepare(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Instances(0); n != 1 {
		t.Fatalf("%d instances, want 1 shared", n)
	}
	if va, vb := visible(t, e, string(a.UID)), visible(t, e, string(b.UID)); va != vb || va == "" {
		t.Fatalf("the sharing claims see %q and %q", va, vb)
	}
	for c, want := range map[*resourceapi.ResourceClaim][2]float64{a: {0.25, float64(4 * gib)}, b: {0.75, float64(12 * gib)}} {
		st, err := e.mgr.Tree().Read(GroupName(c.UID))
		if err != nil || st.Share != want[0] || float64(st.MemoryMax) != want[1] {
			t.Fatalf("claim %s group %+v %v, want share %v memory %v", c.Name, st, err, want[0], want[1])
		}
	}
	if err := d.Unprepare(ctx, a.UID); err != nil {
		t.Fatal(err)
	}
	if n := s.Instances(0); n != 1 {
		t.Fatalf("the instance went with the first claim while the second holds it")
	}
	if err := d.Unprepare(ctx, b.UID); err != nil {
		t.Fatal(err)
	}
	if n := s.Instances(0); n != 0 {
		t.Fatalf("%d instances left", n)
	}
}

// Static mode: an instance the admin made is used as it is and outlives its claims.
func TestMIGStatic(t *testing.T) {
	e, s, m := migEnv(t)
	ctx := context.Background()
	slot := e.cfg.GPUs["gpu-0-mig-2g-20gb-2"].MIG
	in, err := m.CreateMIG(0, slot.Profile, slot.Placement)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := migClaim("0b9c3f2e-0000-4000-8000-00000000c001", "gpu-0-mig-2g-20gb-2", 50, 2*gib)
	if _, err := d.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	if v := visible(t, e, string(c.UID)); v != in.UUID || s.Calls["CreateGpuInstanceWithPlacement"] != 1 {
		t.Fatalf("CUDA_VISIBLE_DEVICES %q (want the admin's %s), %d creates", v, in.UUID, s.Calls["CreateGpuInstanceWithPlacement"])
	}
	if err := d.Unprepare(ctx, c.UID); err != nil {
		t.Fatal(err)
	}
	if n := s.Instances(0); n != 1 {
		t.Fatalf("the admin's instance destroyed by a claim")
	}
}

// A profile that does not fit where the scheduler put it (slices taken
// behind its back), and MIG mode off: a clear error, nothing made.
func TestMIGRefusedNothingHalfMade(t *testing.T) {
	e, s, m := migEnv(t)
	ctx := context.Background()
	d, err := New(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	blocker := e.cfg.GPUs["gpu-0-mig-1g-10gb-5"].MIG
	if _, err := m.CreateMIG(0, blocker.Profile, blocker.Placement); err != nil {
		t.Fatal(err)
	}
	c := migClaim("0b9c3f2e-0000-4000-8000-00000000d001", "gpu-0-mig-3g-40gb-4", 0, 0)
	_, err = d.Prepare(ctx, c)
	if err == nil || !strings.Contains(err.Error(), "3g.40gb at 4 on GPU 0") || !strings.Contains(strings.ToLower(err.Error()), "insufficient") {
		t.Fatalf("Prepare = %v, want the instance refused by NVML, named", err)
	}
	nothingOf(t, e, d, s, string(c.UID), 1)
	s.GPUs[0].MIGMode = 0
	if _, err := d.Prepare(ctx, migClaim("0b9c3f2e-0000-4000-8000-00000000d002", "gpu-0-mig-3g-40gb-0", 0, 0)); err == nil {
		t.Fatal("prepared with MIG mode off")
	}
	nothingOf(t, e, d, s, "0b9c3f2e-0000-4000-8000-00000000d002", 1)
}

// nothingOf: claim uid left no group, CDI spec or entry, and GPU 0 holds instances instances.
func nothingOf(t *testing.T, e env, d *Driver, s *h100fake.Server, uid string, instances int) {
	t.Helper()
	if _, ok := d.Prepared()[uid]; ok {
		t.Errorf("claim %s still in the checkpoint", uid)
	}
	if _, err := os.Stat(filepath.Join(e.run, "groups", GroupName(types.UID(uid)))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("claim %s group left: %v", uid, err)
	}
	specs, _ := gpucdi.ClaimSpecs(e.cdi)
	if slices.Contains(specs, uid) {
		t.Errorf("claim %s CDI spec left", uid)
	}
	if n := s.Instances(0); n != instances {
		t.Errorf("%d MIG instances, want %d", n, instances)
	}
}

// errCrash ends a driver call at a step as a crash would: nothing after it
// runs (the goroutine exits), and a new driver recovers from the checkpoint.
var errCrash = errors.New("crash")

// TestMIGCrashAtEveryStep: a driver stopped dead at each step of a MIG
// claim's Prepare or Unprepare, then a new driver on the same checkpoint
// and GPU and the kubelet's retry: the claim prepared once (or gone), no
// instance nobody holds.
func TestMIGCrashAtEveryStep(t *testing.T) {
	steps := append(append([]Step{}, Steps()...), MIGSteps()...)
	for _, step := range steps {
		t.Run(string(step), func(t *testing.T) {
			e, s, _ := migEnv(t)
			ctx := context.Background()
			uid := "0b9c3f2e-0000-4000-8000-00000000e001"
			c := migClaim(uid, "gpu-0-mig-1g-20gb-0", 25, 2*gib)
			cfg := e.cfg
			cfg.Fault = func(at Step) error {
				if at == step {
					panic(errCrash)
				}
				return nil
			}
			d, err := New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			crashed := run(func() { _, _ = d.Prepare(ctx, c) }) || run(func() { _ = d.Unprepare(ctx, c.UID) })
			if !crashed {
				t.Fatalf("step %s never reached", step)
			}
			d2, err := New(ctx, e.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d2.Prepare(ctx, c); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if n := s.Instances(0); n != 1 {
				t.Fatalf("%d instances after the retry, want 1", n)
			}
			if err := d2.Unprepare(ctx, c.UID); err != nil {
				t.Fatal(err)
			}
			nothingOf(t, e, d2, s, uid, 0)
		})
	}
}

// run calls f, reporting whether it crashed (panicked with errCrash).
func run(f func()) (crashed bool) {
	defer func() {
		if r := recover(); r != nil {
			if r != errCrash { //nolint:errorlint // the panic value itself
				panic(r)
			}
			crashed = true
		}
	}()
	f()
	return false
}

// An instance destroyed under a prepared claim is reported lost; one the
// admin then makes at the same placement is not the claim's to destroy.
func TestMIGDestroyedUnderClaim(t *testing.T) {
	e, s, m := migEnv(t)
	ctx := context.Background()
	d, err := New(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := migClaim("0b9c3f2e-0000-4000-8000-00000000f001", "gpu-0-mig-4g-40gb-0", 0, 0)
	if _, err := d.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	if lost, err := d.LostMIGs(); err != nil || len(lost) != 0 {
		t.Fatalf("lost %v %v before anything was destroyed", lost, err)
	}
	rec := d.Prepared()[string(c.UID)].Devices[0].MIG
	if err := m.DestroyMIG(0, rec.GI); err != nil {
		t.Fatal(err)
	}
	lost, err := d.LostMIGs()
	if err != nil || len(lost) != 1 || lost[0].UUID != rec.UUID || lost[0].Device != "gpu-0-mig-4g-40gb-0" || lost[0].Name != c.Name {
		t.Fatalf("lost %+v %v", lost, err)
	}
	slot := e.cfg.GPUs["gpu-0-mig-4g-40gb-0"].MIG
	if _, err := m.CreateMIG(0, slot.Profile, slot.Placement); err != nil {
		t.Fatal(err)
	}
	if err := d.Unprepare(ctx, c.UID); err != nil {
		t.Fatal(err)
	}
	nothingOf(t, e, d, s, string(c.UID), 1)
}

// On a driver that lists MIG access nodes, the claim's container gets its
// instance's /dev/nvidia-caps nodes (the host's under the device root).
func TestMIGCapNodesInSpec(t *testing.T) {
	e, _, _ := migEnv(t)
	dev := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dev, "nvidia-caps"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"nvidia-cap12", "nvidia-cap13"} {
		if err := os.WriteFile(filepath.Join(dev, "nvidia-caps", n), nil, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.cfg.MIGMinors, []byte("config 1\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu0/gi2/access 21\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	e.cfg.Inject.DevRoot = dev
	d, err := New(context.Background(), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := migClaim("0b9c3f2e-0000-4000-8000-00000000c101", "gpu-0-mig-7g-80gb-0", 0, 0)
	if _, err := d.Prepare(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(e.cdi), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range cache.GetDevice(gpucdi.ClaimKind + "=" + string(c.UID)).ContainerEdits.DeviceNodes {
		nodes = append(nodes, n.Path+"<"+n.HostPath)
	}
	want := []string{"/dev/nvidia0<" + filepath.Join(dev, "nvidia0"), "/dev/nvidia-caps/nvidia-cap12<" + filepath.Join(dev, "nvidia-caps/nvidia-cap12"),
		"/dev/nvidia-caps/nvidia-cap13<" + filepath.Join(dev, "nvidia-caps/nvidia-cap13")}
	if !slices.Equal(nodes, want) {
		t.Fatalf("device nodes %v, want %v", nodes, want)
	}
}

// A claim's MIG instance is found on its GPU by that GPU's UUID, never by
// the index recorded: after a GPU is added before it (its index moves), an
// instance of the same profile and placement on the GPU now at the recorded
// index is neither reported as the claim's lost one nor destroyed for it,
// even when a crash left the claim's record without the instance's UUID; a
// GPU gone takes its instances with it (reported lost).
func TestMIGFoundByParentUUID(t *testing.T) {
	e, s, m := migEnv(t)
	ctx := context.Background()
	d, err := New(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	slot := e.cfg.GPUs["gpu-0-mig-4g-40gb-0"].MIG
	kept := migClaim("0b9c3f2e-0000-4000-8000-00000000f101", "gpu-0-mig-4g-40gb-0", 0, 0)
	if _, err := d.Prepare(ctx, kept); err != nil {
		t.Fatal(err)
	}
	// Another H100 comes first now; its own instance at the same place.
	s.Insert(0)
	if _, err := m.CreateMIG(0, slot.Profile, slot.Placement); err != nil {
		t.Fatal(err)
	}
	if lost, err := d.LostMIGs(); err != nil || len(lost) != 0 {
		t.Fatalf("lost %+v %v after a GPU was added before the claim's, want none", lost, err)
	}
	if err := d.Unprepare(ctx, kept.UID); err != nil {
		t.Fatal(err)
	}
	if a, b := s.Instances(0), s.Instances(1); a != 1 || b != 0 {
		t.Fatalf("instances %d (the added GPU's) and %d (the claim's GPU's) after Unprepare, want 1 and 0", a, b)
	}

	// A crash right after the instance is made leaves it unrecorded; the
	// GPUs are reordered before the driver comes back.
	uid := "0b9c3f2e-0000-4000-8000-00000000f102"
	c := migClaim(uid, "gpu-0-mig-4g-40gb-0", 0, 0)
	cfg := e.cfg
	cfg.Fault = func(at Step) error {
		if at == StepMIGMade {
			panic(errCrash)
		}
		return nil
	}
	d1, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !run(func() { _, _ = d1.Prepare(ctx, c) }) {
		t.Fatal("never crashed")
	}
	if rec := d1.Prepared()[uid].Devices[0].MIG; rec == nil || rec.UUID != "" {
		t.Fatalf("record %+v, want one without the instance's UUID", rec)
	}
	if a, b := s.Instances(0), s.Instances(1); a != 1 || b != 1 {
		t.Fatalf("instances %d and %d, want the claim's made on its GPU (1) beside the other (0)", a, b)
	}
	s.GPUs[0], s.GPUs[1] = s.GPUs[1], s.GPUs[0] // the claim's GPU is at 0 again, the other at 1
	s.Insert(0)                                 // and another before both: the claim's at 1, the other's at 2
	if _, err := m.CreateMIG(0, slot.Profile, slot.Placement); err != nil {
		t.Fatal(err)
	}
	d2, err := New(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Unprepare(ctx, c.UID); err != nil {
		t.Fatal(err)
	}
	if a, b, x := s.Instances(0), s.Instances(1), s.Instances(2); a != 1 || b != 0 || x != 1 {
		t.Fatalf("instances %d, %d (the claim's GPU) and %d after recovery, want 1, 0 and 1", a, b, x)
	}

	// The claim's GPU removed: its instance is reported lost.
	lostOne := migClaim("0b9c3f2e-0000-4000-8000-00000000f103", "gpu-0-mig-4g-40gb-0", 0, 0)
	if _, err := d2.Prepare(ctx, lostOne); err != nil {
		t.Fatal(err)
	}
	s.GPUs = slices.Delete(s.GPUs, 1, 2)
	if lost, err := d2.LostMIGs(); err != nil || len(lost) != 1 || lost[0].Name != lostOne.Name {
		t.Fatalf("lost %+v %v after the claim's GPU was removed, want the claim", lost, err)
	}
	if err := d2.Unprepare(ctx, lostOne.UID); err != nil {
		t.Fatalf("Unprepare with the claim's GPU gone: %v", err)
	}
}
