package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/pkg/api"
)

func TestGroupSettings(t *testing.T) {
	share := func(u, mem int64) []api.GPUAssignment {
		return []api.GPUAssignment{{Index: 0, UUID: "GPU-0", Units: u, MemoryBytes: mem}}
	}
	whole := []api.GPUAssignment{{Index: 0, UUID: "GPU-0", Units: 100, MemoryBytes: 80 << 30, Exclusive: true}}
	high := int32(1000)
	cases := map[string]struct {
		ann  map[string]string
		prio *int32
		gpus []api.GPUAssignment
		want group.Settings
		bad  bool
	}{
		"units and memory":       {gpus: share(25, 10<<30), want: group.Settings{MemoryMax: 10 << 30, Share: 0.25, Priority: policy.Low}},
		"units only":             {gpus: share(75, 0), want: group.Settings{Share: 0.75, Priority: policy.Low}},
		"memory only":            {gpus: share(0, 1<<30), want: group.Settings{MemoryMax: 1 << 30, Priority: policy.Low}},
		"memory and slice":       {ann: map[string]string{api.AnnotationSlice: "20ms"}, gpus: share(0, 1<<30), want: group.Settings{MemoryMax: 1 << 30, Slice: 20 * time.Millisecond, Priority: policy.Low}},
		"units win over a slice": {ann: map[string]string{api.AnnotationSlice: "20ms"}, gpus: share(40, 0), want: group.Settings{Share: 0.4, Priority: policy.Low}},
		"high by annotation":     {ann: map[string]string{api.AnnotationPriority: "high"}, gpus: share(25, 0), want: group.Settings{Share: 0.25, Priority: policy.High}},
		"high by class":          {prio: &high, gpus: share(25, 0), want: group.Settings{Share: 0.25, Priority: policy.High}},
		"whole GPU: no share":    {gpus: whole, want: group.Settings{MemoryMax: 80 << 30, Priority: policy.Low}},
		"smallest of two GPUs": {gpus: []api.GPUAssignment{{Index: 0, UUID: "a", Units: 30, MemoryBytes: 2 << 30}, {Index: 1, UUID: "b", Units: 20, MemoryBytes: 3 << 30}},
			want: group.Settings{MemoryMax: 2 << 30, Share: 0.2, Priority: policy.Low}},
		"bad priority": {ann: map[string]string{api.AnnotationPriority: "max"}, gpus: share(25, 0), bad: true},
		"elastic: gpu-memory is the guarantee": {ann: map[string]string{api.AnnotationMemoryMax: "20Gi", api.AnnotationMemorySpill: "host"},
			gpus: share(25, 6<<30), want: group.Settings{MemoryMin: 6 << 30, MemoryMax: 20 << 30, MemorySpill: true, Share: 0.25, Priority: policy.Low}},
		"elastic ceiling below the guarantee": {ann: map[string]string{api.AnnotationMemoryMax: "4Gi"}, gpus: share(25, 6<<30), bad: true},
		// Shares over each GPU's own units total (an MPS GPU of 96 units), not a constant 100.
		"units of a 96-unit GPU": {gpus: []api.GPUAssignment{{Index: 2, UUID: "GPU-96", Units: 24}}, want: group.Settings{Share: 0.25, Priority: policy.Low}},
		"smallest share, not smallest units": {gpus: []api.GPUAssignment{{Index: 0, UUID: "a", Units: 30}, {Index: 2, UUID: "GPU-96", Units: 24}},
			want: group.Settings{Share: 0.25, Priority: policy.Low}},
		// All of a GPU's units (or more) are its whole time: no share, as a DRA
		// claim consuming all units gets (was a share of 100 % here).
		"units past the total": {gpus: []api.GPUAssignment{{Index: 2, UUID: "GPU-96", Units: 100}}, want: group.Settings{Priority: policy.Low}},
		"all the units, with a slice": {ann: map[string]string{api.AnnotationSlice: "20ms"}, gpus: share(100, 0),
			want: group.Settings{Slice: 20 * time.Millisecond, Priority: policy.Low}},
		"share ceiling": {ann: map[string]string{api.AnnotationShareMax: "40%"}, gpus: share(25, 0), want: group.Settings{Share: 0.25, ShareMax: 0.4, Priority: policy.Low}},
		"malformed share ceiling left to applySettings": {ann: map[string]string{api.AnnotationShareMax: "x"}, gpus: share(25, 0), want: group.Settings{Share: 0.25, Priority: policy.Low}},
		"elastic ceiling without a memory request: not used": {ann: map[string]string{api.AnnotationMemoryMax: "20Gi"}, gpus: share(25, 0),
			want: group.Settings{Share: 0.25, Priority: policy.Low}},
		"a third, as the share file holds it": {gpus: []api.GPUAssignment{{Index: 2, UUID: "GPU-96", Units: 32}}, want: group.Settings{Share: 0.333333, Priority: policy.Low}},
	}
	total := func(uuid string) int64 {
		if uuid == "GPU-96" {
			return 96
		}
		return api.DefaultUnitsPerGPU
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}, Spec: corev1.PodSpec{Priority: tc.prio}}
			got, err := ContainerSettings(pod, tc.gpus, total)
			if tc.bad {
				if !errors.Is(err, api.ErrInvalidSlicing) && !errors.Is(err, api.ErrInvalidElastic) {
					t.Fatalf("err = %v, want ErrInvalidSlicing or ErrInvalidElastic", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// A changed assignment (units 25 -> 50) or priority rewrites the group's
// files; an unchanged one leaves them alone.
func TestApplySettingsLive(t *testing.T) {
	groups := testGroups(t)
	tree := groups.Tree()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}, {Name: "other"}}}}
	name := deviceplugin.GroupName(deviceplugin.Candidate{Name: "p", Container: "main", UID: "u1"})
	if err := tree.Create(name); err != nil {
		t.Fatal(err)
	}
	want := func(u int64) map[string][]api.GPUAssignment {
		return map[string][]api.GPUAssignment{"main": {{Index: 0, UUID: "g", Units: u, MemoryBytes: 1 << 30}}, "other": {{Index: 0, UUID: "g", Units: 10}}}
	}
	ctx := context.Background()
	if err := applySettings(ctx, groups, nil, pod, want(25), nil, nil); err != nil {
		t.Fatal(err)
	}
	if s, err := tree.Read(name); err != nil || s.Share != 0.25 || s.MemoryMax != 1<<30 {
		t.Fatalf("after 25: %+v %v", s, err)
	}
	if tree.Exists(deviceplugin.GroupName(deviceplugin.Candidate{Name: "p", Container: "other", UID: "u1"})) {
		t.Fatal("a group was made for a container Allocate never saw")
	}
	if err := applySettings(ctx, groups, nil, pod, want(50), nil, nil); err != nil {
		t.Fatal(err)
	}
	if s, _ := tree.ReadFile(name, group.FileShare); s != "50%" {
		t.Fatalf("share file %q after 25 -> 50", s)
	}
	pod.Annotations = map[string]string{api.AnnotationPriority: "high"}
	if err := applySettings(ctx, groups, nil, pod, want(50), nil, nil); err != nil {
		t.Fatal(err)
	}
	if s, _ := tree.ReadFile(name, group.FilePriority); s != "high" {
		t.Fatalf("priority file %q", s)
	}
}

// Shrinking memory below what the group holds is applied (allocations fail
// until it fits) and reported; growing it or shrinking above use is not.
func TestApplySettingsMemoryBelowUse(t *testing.T) {
	groups := testGroups(t)
	tree := groups.Tree()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}
	name := deviceplugin.GroupName(deviceplugin.Candidate{Name: "p", Container: "main", UID: "u1"})
	if err := tree.Create(name); err != nil {
		t.Fatal(err)
	}
	if err := tree.WriteFile(name, group.FileMemoryCurrent, "3221225472\n"); err != nil { // 3 GiB held
		t.Fatal(err)
	}
	var told []string
	over := func(_ *corev1.Pod, c string, cur, lim uint64, n int) {
		told = append(told, fmt.Sprintf("%s %d>%d on %d", c, cur, lim, n))
	}
	mem := func(m int64) map[string][]api.GPUAssignment {
		return map[string][]api.GPUAssignment{"main": {{Index: 0, UUID: "g", Units: 25, MemoryBytes: m}}}
	}
	ctx := context.Background()
	for _, m := range []int64{8 << 30, 4 << 30, 6 << 30, 2 << 30} {
		if err := applySettings(ctx, groups, nil, pod, mem(m), over, nil); err != nil {
			t.Fatal(err)
		}
	}
	if len(told) != 1 || told[0] != "main 3221225472>2147483648 on 1" {
		t.Fatalf("told %v", told)
	}
	if s, _ := tree.Read(name); s.MemoryMax != 2<<30 {
		t.Fatalf("limit %d not applied", s.MemoryMax)
	}
}

// The pod's share ceiling goes to every group; a malformed one changes
// nothing (the ceiling stays, the other settings still apply) and is told.
func TestApplySettingsShareMax(t *testing.T) {
	groups := testGroups(t)
	tree := groups.Tree()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1", Annotations: map[string]string{api.AnnotationShareMax: "40%"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}
	name := deviceplugin.GroupName(deviceplugin.Candidate{Name: "p", Container: "main", UID: "u1"})
	if err := tree.Create(name); err != nil {
		t.Fatal(err)
	}
	units := func(u int64) map[string][]api.GPUAssignment {
		return map[string][]api.GPUAssignment{"main": {{Index: 0, UUID: "g", Units: u}}}
	}
	var told []string
	tell := func(_ *corev1.Pod, err error) { told = append(told, fmt.Sprint(err)) }
	ctx := context.Background()
	check := func(step string, share, shareMax float64) {
		t.Helper()
		if s, err := tree.Read(name); err != nil || s.Share != share || s.ShareMax != shareMax {
			t.Fatalf("%s: %+v %v; want share %v, share.max %v", step, s, err, share, shareMax)
		}
	}
	if err := applySettings(ctx, groups, nil, pod, units(25), nil, tell); err != nil {
		t.Fatal(err)
	}
	check("40%", 0.25, 0.4)
	if v, _ := tree.ReadFile(name, group.FileShareMax); v != "40%" {
		t.Fatalf("share.max file %q", v)
	}
	pod.Annotations[api.AnnotationShareMax] = "33"
	if err := applySettings(ctx, groups, nil, pod, units(25), nil, tell); err != nil {
		t.Fatal(err)
	}
	check("units 33", 0.25, 0.33)
	pod.Annotations[api.AnnotationShareMax] = "lots"
	if err := applySettings(ctx, groups, nil, pod, units(50), nil, tell); err != nil {
		t.Fatal(err)
	}
	check("lots", 0.5, 0.33)
	delete(pod.Annotations, api.AnnotationShareMax)
	if err := applySettings(ctx, groups, nil, pod, units(50), nil, tell); err != nil {
		t.Fatal(err)
	}
	check("none", 0.5, 0)
	if len(told) != 4 || told[0] != "<nil>" || told[1] != "<nil>" || !strings.Contains(told[2], `gpuslice.io/share-max="lots"`) || told[3] != "<nil>" {
		t.Fatalf("told %q", told)
	}
}

// A malformed ceiling is reported once per value and pod.
func TestNoteShareMax(t *testing.T) {
	r := &reconciler{badShareMax: map[types.UID]string{}, runtime: newKnownContainers(nil, 4)}
	steps := []struct {
		uid  types.UID
		v    string
		bad  bool
		want bool
	}{
		{"a", "lots", true, true}, {"a", "lots", true, false}, {"b", "lots", true, true}, {"a", "0%", true, true},
		{"a", "40%", false, false}, {"a", "0%", true, true}, {"b", "", false, false}, {"b", "lots", true, true},
	}
	for i, s := range steps {
		if got := r.noteShareMax(s.uid, s.v, s.bad); got != s.want {
			t.Fatalf("step %d (%s %q bad %v): report %v, want %v", i, s.uid, s.v, s.bad, got, s.want)
		}
	}
	r.forgetPods([]*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{UID: "b"}}})
	if _, ok := r.badShareMax["a"]; ok || len(r.badShareMax) != 1 {
		t.Fatalf("after forgetting a: %v", r.badShareMax)
	}
}

// testGroups is a groups manager of a new run directory with a stand-in for
// the time-slice daemon that acknowledges every settings generation (the
// round trip through a real daemon is internal/groupmgr's test).
func testGroups(t *testing.T) *groupmgr.Manager {
	m := groupmgr.New(groupmgr.Config{RunDir: t.TempDir()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for tree := m.Tree(); ctx.Err() == nil; time.Sleep(time.Millisecond) {
			names, _ := tree.List()
			for _, n := range names {
				g, err := tree.Generation(n)
				if a, _ := tree.Applied(n); err == nil && a < g {
					_ = tree.WriteFile(n, group.FileApplied, strconv.FormatUint(g, 10)) // retried at the next pass
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return m
}
