package dra

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/timeslice/timeslicetest"
)

// startDaemon runs a time-slice daemon on runDir (one made-up GPU) until the test ends.
func startDaemon(t testing.TB, runDir string) { t.Helper(); timeslicetest.Start(t, runDir) }

const gib = int64(1) << 30

type env struct {
	run, cdi, ckpt string
	mgr            *groupmgr.Manager
	cfg            Config
}

func newEnv(t testing.TB) env {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, filepath.Join(dir, "run"))
	return envAt(dir)
}

// envAt is the driver's configuration in dir, whose run directory a daemon serves.
func envAt(dir string) env {
	e := env{run: filepath.Join(dir, "run"), cdi: filepath.Join(dir, "cdi"), ckpt: filepath.Join(dir, "plugin", "checkpoint.json")}
	e.mgr = groupmgr.New(groupmgr.Config{RunDir: e.run, Timeout: 5 * time.Second})
	e.cfg = Config{Pool: "node-a", Groups: e.mgr, CDIDir: e.cdi, Checkpoint: e.ckpt,
		GPUs: map[string]GPU{
			"gpu-0": {UUID: "GPU-aaaa", Minor: 0, MemoryBytes: 16 * gib, Units: 100, Healthy: true},
			"gpu-1": {UUID: "GPU-bbbb", Minor: 1, MemoryBytes: 16 * gib, Units: 100, Healthy: true},
		},
		Inject: deviceplugin.Inject{DevRoot: "/dev", Library: "/opt/gpuslice/libgpuslice.so", Preload: filepath.Join(dir, "preload"),
			RunDir: e.run, Socket: filepath.Join(e.run, "node.sock")},
	}
	return e
}

// claim of units and memory (0: no request, the whole GPU) on gpu-0, with
// opaque configs (raw JSON).
func claim(uid string, units, mem int64, configs ...string) *resourceapi.ResourceClaim {
	r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: DriverName, Pool: "node-a", Device: "gpu-0"}
	if units > 0 {
		id := types.UID("share-" + uid)
		r.ShareID = &id
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
			devices.CapacityUnits: *resource.NewQuantity(units, resource.DecimalSI), devices.CapacityMemory: *resource.NewQuantity(mem, resource.BinarySI)}
	} else {
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
			devices.CapacityUnits: *resource.NewQuantity(100, resource.DecimalSI), devices.CapacityMemory: *resource.NewQuantity(16*gib, resource.BinarySI)}
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "c-" + uid, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{r}}}
	for _, raw := range configs {
		c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source: resourceapi.AllocationConfigSourceClaim, DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: DriverName, Parameters: runtime.RawExtension{Raw: []byte(raw)}}}})
	}
	return c
}

const cfgHead = `{"apiVersion":"gpuslice.io/v1alpha1","kind":"GPUShareConfig"`

func TestPrepareShare(t *testing.T) {
	e := newEnv(t)
	d, err := New(context.Background(), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := claim("0b9c3f2e-0000-4000-8000-000000000001", 25, 4*gib, cfgHead+`,"priority":"high","shareCeiling":50}`)
	devs, err := d.Prepare(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].DeviceName != "gpu-0" || devs[0].PoolName != "node-a" || devs[0].ShareID == nil ||
		!slices.Equal(devs[0].CDIDeviceIDs, []string{"gpuslice.io/claim=" + string(c.UID)}) {
		t.Fatalf("devices %+v", devs)
	}
	name := GroupName(c.UID)
	s, err := e.mgr.Tree().Read(name)
	if err != nil {
		t.Fatal(err)
	}
	if s.Share != 0.25 || s.MemoryMax != uint64(4*gib) || s.ShareMax != 0.5 || s.Priority.String() != "high" || s.Slice != 0 {
		t.Fatalf("group settings %+v", s)
	}
	checkSpec(t, e, string(c.UID), name)
	// Idempotent: again, the same answer and one group.
	again, err := d.Prepare(ctx, c)
	if err != nil || len(again) != 1 || again[0].DeviceName != "gpu-0" {
		t.Fatalf("second Prepare: %v %v", again, err)
	}
	// An agent restart: a new driver from the checkpoint knows the claim.
	d2, err := New(context.Background(), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := d2.Prepared(); len(p) != 1 || p[string(c.UID)].Group != name || p[string(c.UID)].Devices[0].Units != 25 {
		t.Fatalf("after restart: %+v", p)
	}
	if _, err := d2.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := d2.Unprepare(ctx, c.UID); err != nil {
		t.Fatal(err)
	}
	if e.mgr.Tree().Exists(name) {
		t.Fatal("group left after Unprepare")
	}
	if ents, _ := os.ReadDir(e.cdi); len(ents) != 0 {
		t.Fatalf("CDI specs left: %v", ents)
	}
	if ck, err := checkpoint.Load(e.ckpt); err != nil || len(ck.Claims) != 0 {
		t.Fatalf("checkpoint after Unprepare: %v %v", ck, err)
	}
	if err := d2.Unprepare(ctx, c.UID); err != nil {
		t.Fatalf("second Unprepare: %v", err)
	}
}

// checkSpec: the claim's CDI spec resolves through the CDI library and holds
// the GPU node, the preload list, the group directory read-only (also at its
// GPU's path, so that a container naming several claims has each GPU in its
// claim's group) and the socket.
func checkSpec(t *testing.T, e env, uid, name string) {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(e.cdi), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	dev := cache.GetDevice("gpuslice.io/claim=" + uid)
	if dev == nil {
		t.Fatalf("no CDI device for claim %s: %v", uid, cache.GetErrors())
	}
	ed := dev.ContainerEdits
	var mounts []string
	for _, m := range ed.Mounts {
		mounts = append(mounts, m.ContainerPath+":"+m.Options[0])
	}
	sort.Strings(mounts)
	for _, want := range []string{"/etc/ld.so.preload:ro", groupstate.ContainerDir + ":ro", filepath.Join(e.run, "groups", name) + ":ro",
		filepath.Join(e.run, "node.sock") + ":rw", groupstate.ContainerDeviceDir("GPU-aaaa") + ":ro",
		groupstate.ContainerDeviceFile("GPU-aaaa") + ":rw"} {
		if !slices.Contains(mounts, want) {
			t.Errorf("mount %s missing from %v", want, mounts)
		}
	}
	if len(ed.DeviceNodes) != 1 || ed.DeviceNodes[0].Path != "/dev/nvidia0" {
		t.Errorf("device nodes %+v", ed.DeviceNodes)
	}
	if !slices.Contains(ed.Env, "GPUSLICE_GROUP="+name) {
		t.Errorf("env %v", ed.Env)
	}
}

func TestPrepareWholeGPU(t *testing.T) {
	e := newEnv(t)
	d, err := New(context.Background(), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := claim("0b9c3f2e-0000-4000-8000-000000000002", 0, 0, cfgHead+`,"slice":"20ms"}`)
	if _, err := d.Prepare(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	s, err := e.mgr.Tree().Read(GroupName(c.UID))
	if err != nil || s.Share != 0 || s.MemoryMax != 0 || s.Slice != 20*time.Millisecond {
		t.Fatalf("whole GPU group %+v %v", s, err)
	}
}

// A bad configuration is refused naming the field, and nothing of the claim
// is applied: no group, no CDI spec, no checkpoint entry.
func TestPrepareRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name, cfg, field string
		units            int64
	}{
		{"ceiling", cfgHead + `,"shareCeiling":0}`, "shareCeiling", 25},
		{"unknown field", cfgHead + `,"shares":1}`, `unknown field "shares"`, 25},
		{"slice on a share", cfgHead + `,"slice":"20ms"}`, "slice: Forbidden", 25},
		{"memory ceiling below", cfgHead + `,"memoryCeiling":"1Gi"}`, "memoryCeiling", 25},
		{"priority", cfgHead + `,"priority":"urgent"}`, "priority", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			d, err := New(context.Background(), e.cfg)
			if err != nil {
				t.Fatal(err)
			}
			c := claim("0b9c3f2e-0000-4000-8000-000000000003", tc.units, 4*gib, tc.cfg)
			res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
			if err != nil {
				t.Fatal(err)
			}
			if r := res[c.UID]; r.Err == nil || !strings.Contains(r.Err.Error(), tc.field) {
				t.Fatalf("Prepare error %v, want one naming %q", r.Err, tc.field)
			}
			if l, _ := e.mgr.Tree().List(); len(l) != 0 {
				t.Fatalf("groups left: %v", l)
			}
			if ents, _ := os.ReadDir(e.cdi); len(ents) != 0 {
				t.Fatalf("CDI specs left: %v", ents)
			}
			if len(d.Prepared()) != 0 {
				t.Fatal("refused claim in the checkpoint")
			}
		})
	}
}

func TestCorruptCheckpointRefused(t *testing.T) {
	e := newEnv(t)
	if err := os.MkdirAll(filepath.Dir(e.ckpt), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.ckpt, []byte(`{"version":"v1","checksum":"00","data":{"claims":{}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), e.cfg); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("New with a corrupt checkpoint: %v", err)
	}
}
