package agent

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// Hot add and remove of whole GPUs go through the groups manager: the
// assignment's GPUs become the group's (Resources.GPUs, one Set each change),
// and a container with a group is given the devices of the GPUs both its
// assignment and its group hold; a container without a group, or a group
// from before GPUs were kept, is given the assignment's.
func TestHotGPUsThroughGroup(t *testing.T) {
	groups := testGroups(t)
	tree := groups.Tree()
	r := &reconciler{tree: tree, groups: groups}
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}, {Name: "nogroup"}}}}
	name := deviceplugin.GroupName(deviceplugin.Candidate{Name: "p", Container: "main", UID: "u1"})
	whole := func(uuids ...string) []api.GPUAssignment {
		var out []api.GPUAssignment
		for i, u := range uuids {
			out = append(out, api.GPUAssignment{Index: int32(i), UUID: u, Units: 100, MemoryBytes: 1 << 30, Exclusive: true})
		}
		return out
	}
	given := func(container string, assigned []api.GPUAssignment) []string {
		t.Helper()
		got, err := r.containerGPUs(pod, container, assigned)
		if err != nil {
			t.Fatal(err)
		}
		return gpuIDs(got)
	}
	// Allocate made the group with one GPU; an older agent's group has no gpus file.
	if err := groups.Create(ctx, name, groupmgr.Resources{}, groupmgr.CreateOptions{Container: true, NoWait: true}); err != nil {
		t.Fatal(err)
	}
	if got := given("main", whole("GPU-a", "GPU-b")); !slices.Equal(got, []string{"GPU-a", "GPU-b"}) {
		t.Fatalf("a group without GPUs kept: given %q, want the assignment's", got)
	}
	for i, step := range []struct {
		assigned []string
		want     []string
	}{
		{[]string{"GPU-a"}, []string{"GPU-a"}},
		{[]string{"GPU-b", "GPU-a"}, []string{"GPU-a", "GPU-b"}}, // hot add
		{[]string{"GPU-b"}, []string{"GPU-b"}},                   // hot remove
		{nil, []string{}},                                        // all removed
	} {
		want := map[string][]api.GPUAssignment{"main": whole(step.assigned...), "nogroup": whole("GPU-z")}
		if err := applySettings(ctx, groups, nil, pod, want, nil, nil); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		res, err := groups.Get(name)
		if err != nil || !slices.Equal(res.GPUs, step.want) {
			t.Fatalf("%d: group's GPUs %q (%v), want %q", i, res.GPUs, err, step.want)
		}
		if got := given("main", want["main"]); !slices.Equal(got, step.want) {
			t.Fatalf("%d: given %q, want %q", i, got, step.want)
		}
		if got := given("nogroup", want["nogroup"]); !slices.Equal(got, []string{"GPU-z"}) {
			t.Fatalf("%d: a container without a group given %q, want its assignment's", i, got)
		}
	}
	// A bad annotation changes no setting, yet the GPUs follow the assignment.
	pod.Annotations = map[string]string{api.AnnotationPriority: "max"}
	before, err := groups.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := applySettings(ctx, groups, nil, pod, map[string][]api.GPUAssignment{"main": whole("GPU-a", "GPU-b")}, nil, nil); err == nil {
		t.Fatal("a bad priority applied without an error")
	}
	if res, err := groups.Get(name); err != nil || res.Settings != before.Settings || !slices.Equal(res.GPUs, []string{"GPU-a", "GPU-b"}) {
		t.Fatalf("after a bad annotation: %+v (%v), want the settings kept and GPUs [GPU-a GPU-b]", res, err)
	}
	pod.Annotations = nil
	// The assignment gains a GPU the group does not hold yet (its Set has not
	// happened, or failed): not given until the group holds it.
	if err := applySettings(ctx, groups, nil, pod, map[string][]api.GPUAssignment{"main": whole("GPU-b")}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := given("main", whole("GPU-b", "GPU-c")); !slices.Equal(got, []string{"GPU-b"}) {
		t.Fatalf("given %q before the group holds GPU-c, want [GPU-b]", got)
	}
	// The group holds a GPU the assignment dropped: not given.
	if got := given("main", nil); len(got) != 0 {
		t.Fatalf("given %q with no GPU assigned", got)
	}
}
