package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/pkg/api"
)

func TestPodOfCgroup(t *testing.T) {
	uid := "0b3d1c2e-1111-2222-3333-444455556666"
	us := "0b3d1c2e_1111_2222_3333_444455556666"
	cases := map[string]string{
		"12:devices:/kubepods/burstable/pod" + uid + "/abc\n0::/\n":                                          uid,
		"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/cri-x.scope\n": uid,
		"0::/kubepods.slice/kubepods-pod" + us + ".slice/cri-x.scope\n":                                      uid,
		"0::/user.slice/session-3.scope\n":                                                                   "",
		"12:devices:/kubepods/burstable/podnot-a-uid/abc\n":                                                  "",
		"0::/system.slice/mypod" + uid + "\n":                                                                "",
		"garbage":                                                                                            "",
	}
	for in, want := range cases {
		got, ok := podOfCgroup(in)
		if string(got) != want || ok != (want != "") {
			t.Errorf("podOfCgroup(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

// assignedPod is a pod on n1 whose container main holds GPUs idx.
func assignedPod(t *testing.T, name, uid string, idx ...int32) *corev1.Pod {
	t.Helper()
	a := &api.Assignment{Version: api.AssignmentVersion, Node: "n1", Containers: []api.ContainerAssignment{{Name: "main"}}}
	for _, i := range idx {
		a.Containers[0].GPUs = append(a.Containers[0].GPUs, api.GPUAssignment{Index: i, UUID: "GPU-" + string(rune('a'+i)), Units: 50, MemoryBytes: 1 << 30})
	}
	b, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{}
	p.Name, p.Namespace, p.UID, p.Spec.NodeName = name, "ns", types.UID(uid), "n1"
	p.Annotations = map[string]string{api.AnnotationAssignment: string(b)}
	return p
}

func lister(t *testing.T, pods ...*corev1.Pod) listersv1.PodLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range pods {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return listersv1.NewPodLister(idx)
}

// TestOwnedByCgroup: a process without a group entry belongs to the pod whose
// cgroup it is in, for that pod's GPUs only; others are unscheduled.
func TestOwnedByCgroup(t *testing.T) {
	uid := "0b3d1c2e-1111-2222-3333-444455556666"
	done := assignedPod(t, "done", "0b3d1c2e-1111-2222-3333-000000000000", 3)
	done.Status.Phase = corev1.PodSucceeded
	proc := t.TempDir()
	for pid, cg := range map[string]string{"100": "0::/kubepods/pod" + uid + "/c1\n", "200": "0::/user.slice\n",
		"300": "0::/kubepods/pod" + string(done.UID) + "/c1\n"} {
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "cgroup"), []byte(cg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := &owners{pods: lister(t, assignedPod(t, "p", uid, 0, 2), done), tree: group.NewTree(t.TempDir()), procRoot: proc}
	o.refresh(context.Background())
	for _, c := range []struct {
		gpu  int
		pid  uint32
		want bool
	}{{0, 100, true}, {2, 100, true}, {1, 100, false}, {0, 200, false}, {3, 300, false}, {0, 999, false}} {
		if got := o.owned(c.gpu, c.pid); got != c.want {
			t.Errorf("owned(gpu %d, pid %d) = %v, want %v", c.gpu, c.pid, got, c.want)
		}
	}
}

func TestPodHoldings(t *testing.T) {
	other := assignedPod(t, "q", "u2", 1)
	other.Spec.NodeName = "n2"
	h := podHoldings{pods: lister(t, assignedPod(t, "p", "u1", 0, 1), assignedPod(t, "r", "u3", 1), other), node: "n1"}
	got, err := h.Held(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Units != 50 || got[1].Units != 100 || got[1].MemoryBytes != 2<<30 {
		t.Fatalf("Held = %+v", got)
	}
}
