package deviceplugin

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/pkg/api"
)

const res = api.ResourceGPU

// pod builds a pod on node n1 whose containers ask for counts of the
// resource; gpus (per container, by index) make its assignment (nil: none).
func pod(name string, counts []int64, gpus [][]int32) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: "n1"}}
	a := api.Assignment{Version: api.AssignmentVersion, Node: "n1"}
	for i, n := range counts {
		c := corev1.Container{Name: "c" + string(rune('0'+i))}
		if n > 0 {
			c.Resources.Limits = corev1.ResourceList{res: *resource.NewQuantity(n, resource.DecimalSI)}
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
		if i < len(gpus) && len(gpus[i]) > 0 {
			ca := api.ContainerAssignment{Name: c.Name}
			for _, g := range gpus[i] {
				ca.GPUs = append(ca.GPUs, api.GPUAssignment{Index: g, UUID: uuid(g), Units: 100, MemoryBytes: int64(g+1) << 30, Exclusive: true})
			}
			a.Containers = append(a.Containers, ca)
		}
	}
	if gpus != nil {
		b, err := a.Marshal()
		if err != nil {
			panic(err)
		}
		p.Annotations = map[string]string{api.AnnotationAssignment: string(b)}
	}
	return p
}

func uuid(i int32) string { return "GPU-000" + string(rune('0'+i)) }

func TestCandidates(t *testing.T) {
	running := pod("running", []int64{1}, [][]int32{{0}})
	twoC := pod("two", []int64{1, 2}, [][]int32{{0}, {1, 2}})
	done := pod("done", []int64{1}, [][]int32{{3}})
	done.Status.Phase = corev1.PodSucceeded
	deleting := pod("deleting", []int64{1}, [][]int32{{3}})
	deleting.DeletionTimestamp = &metav1.Time{}
	noGPU := pod("cpu", []int64{0}, nil)
	noAssign := pod("bare", []int64{1}, nil)
	held := func(p *corev1.Pod, c string, _ corev1.ResourceName) (int, bool) {
		h := p.Name == "running" || (p.Name == "two" && c == "c0")
		if h {
			return 1, true
		}
		return 0, false
	}
	got := Candidates([]*corev1.Pod{running, twoC, done, deleting, noGPU, noAssign}, res, Records{Held: held})
	var names []string
	for _, c := range got {
		names = append(names, c.String())
	}
	if want := []string{"ns/two/c1", "ns/bare/c0"}; !slices.Equal(names, want) {
		t.Fatalf("candidates %v, want %v", names, want)
	}
	if got[0].Count != 2 || len(got[0].GPUs) != 2 || got[0].UID != "uid-two" {
		t.Fatalf("candidate %+v", got[0])
	}
	if !errors.Is(got[1].AssignmentErr, ErrNoAssignment) {
		t.Fatalf("no assignment: %v", got[1].AssignmentErr)
	}
	// First unallocated container in spec order, one per pod.
	if got := Candidates([]*corev1.Pod{twoC}, res, Records{}); len(got) != 1 || got[0].Container != "c0" {
		t.Fatalf("spec order: %+v", got)
	}
}

func TestResolve(t *testing.T) {
	a := Candidates([]*corev1.Pod{pod("a", []int64{2}, [][]int32{{1, 3}})}, res, Records{})[0]
	b := Candidates([]*corev1.Pod{pod("b", []int64{1}, [][]int32{{0}})}, res, Records{})[0]
	c := Candidates([]*corev1.Pod{pod("c", []int64{1}, [][]int32{{2}})}, res, Records{})[0]
	bare := Candidates([]*corev1.Pod{pod("bare", []int64{1}, nil)}, res, Records{})[0]
	short := Candidates([]*corev1.Pod{pod("short", []int64{3}, [][]int32{{1}})}, res, Records{})[0]
	other := pod("other", []int64{1}, [][]int32{{0}})
	other.Spec.NodeName = "n2"
	wrongNode := Candidates([]*corev1.Pod{other}, res, Records{})[0]
	cases := []struct {
		name  string
		cands []Candidate
		size  int
		want  string
		err   error
	}{
		{"only one", []Candidate{a}, 2, "ns/a/c0", nil},
		{"size tells apart", []Candidate{a, b}, 1, "ns/b/c0", nil},
		{"ambiguous", []Candidate{b, c}, 1, "", ErrAmbiguous},
		{"nobody", nil, 1, "", ErrNoCandidate},
		{"nobody of that size", []Candidate{a}, 1, "", ErrNoCandidate},
		{"no assignment", []Candidate{bare}, 1, "", ErrNoAssignment},
		{"assignment for another node", []Candidate{wrongNode}, 1, "", ErrNoAssignment},
		{"assignment smaller than request", []Candidate{short}, 3, "", ErrMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.cands, tc.size)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("got %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestPreferAndTie(t *testing.T) {
	a := Candidates([]*corev1.Pod{pod("a", []int64{2}, [][]int32{{1, 3}})}, res, Records{})[0]
	avail := []string{SlotID(uuid(0), 0), SlotID(uuid(1), 5), SlotID(uuid(1), 2), SlotID(uuid(3), 7)}
	got, err := Prefer(a, avail, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{SlotID(uuid(1), 2), SlotID(uuid(3), 7)}; !slices.Equal(got, want) {
		t.Fatalf("Prefer = %v, want %v", got, want)
	}
	if err := Tie(a, got); err != nil {
		t.Fatalf("Tie of its own preference: %v", err)
	}
	must := []string{SlotID(uuid(3), 9)}
	if got, _ := Prefer(a, avail, must); !slices.Contains(got, must[0]) || len(got) != 2 {
		t.Fatalf("must-include ignored: %v", got)
	}
	if _, err := Prefer(a, avail[:3], nil); !errors.Is(err, ErrMismatch) {
		t.Fatalf("no slot on GPU 3: err = %v", err)
	}
	for name, ids := range map[string][]string{
		"other gpu":    {SlotID(uuid(1), 0), SlotID(uuid(0), 0)},
		"same gpu 2x":  {SlotID(uuid(1), 0), SlotID(uuid(1), 1)},
		"extra slot":   {SlotID(uuid(1), 0), SlotID(uuid(3), 0), SlotID(uuid(0), 0)},
		"missing slot": {SlotID(uuid(1), 0)},
	} {
		if err := Tie(a, ids); !errors.Is(err, ErrMismatch) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if err := Tie(a, []string{"garbage", SlotID(uuid(1), 0)}); !errors.Is(err, ErrInvalidSlot) {
		t.Errorf("garbage id: err = %v", err)
	}
}

func TestResponse(t *testing.T) {
	c := Candidates([]*corev1.Pod{pod("a", []int64{2}, [][]int32{{3, 1}})}, res, Records{})[0]
	gpus := map[string]gpuset.GPU{}
	for i := range int32(4) {
		gpus[uuid(i)] = gpuset.GPU{Index: i, UUID: uuid(i), Minor: uint32(i), Healthy: true}
	}
	in := Inject{DevRoot: "/host/dev", ControlDevices: []string{"/dev/nvidiactl"}, Library: "/opt/gs/libgpuslice.so",
		Preload: "/run/gpuslice/ld.so.preload", RunDir: "/run/gpuslice", Socket: "/run/gpuslice/node.sock", SimDir: "/opt/gs/sim", SimHostProc: "/proc", Env: map[string]string{"X": "1"}}
	g := GroupName(c)
	r, err := in.Response(c, gpus, g)
	if err != nil {
		t.Fatal(err)
	}
	var devs []string
	for _, d := range r.Devices {
		devs = append(devs, d.HostPath+">"+d.ContainerPath+":"+d.Permissions)
	}
	want := []string{"/host/dev/nvidia1>/dev/nvidia1:rw", "/host/dev/nvidia3>/dev/nvidia3:rw", "/dev/nvidiactl>/dev/nvidiactl:rw"}
	if !slices.Equal(devs, want) {
		t.Fatalf("devices %v, want %v", devs, want)
	}
	env := r.Envs
	if _, ok := env["GPUSLICE_MEMORY_LIMIT"]; ok || env["LD_PRELOAD"] != ContainerLibDir+"/libgpuslice.so" ||
		env["GPUSLICE_GROUP_FILE"] != "/run/gpuslice/groups/"+g+"/"+groupstate.FileName || env["X"] != "1" ||
		env["GPUSLICE_NODE_SOCKET"] != "/run/gpuslice/node.sock" || env["LD_LIBRARY_PATH"] != ContainerSimDir ||
		env["GPUSLICE_SIM_HOST_PROC"] != ContainerSimHostProc {
		t.Fatalf("env %v", env)
	}
	if !slices.ContainsFunc(r.Mounts, func(m *pluginapi.Mount) bool {
		return m.HostPath == "/proc" && m.ContainerPath == ContainerSimHostProc && m.ReadOnly
	}) {
		t.Fatalf("no read-only host /proc mount for the simulated driver: %v", r.Mounts)
	}
	// The group's settings and cgroup binding are the node's: its directory is
	// read-only in the container, only the state file the library maps is not.
	dir := "/run/gpuslice/groups/" + g
	var group []string
	for _, m := range r.Mounts {
		if strings.HasPrefix(m.HostPath, dir) {
			group = append(group, fmt.Sprintf("%s>%s ro=%v", m.HostPath, m.ContainerPath, m.ReadOnly))
		}
	}
	// The state file also at the one path the library looks at first, so a
	// member that drops GPUSLICE_GROUP_FILE is still held to the group.
	if want := []string{dir + ">" + dir + " ro=true", dir + "/" + groupstate.FileName + ">" + dir + "/" + groupstate.FileName + " ro=false",
		dir + ">" + ContainerGroupDir + " ro=true", dir + "/" + groupstate.FileName + ">" + ContainerGroupFile + " ro=false"}; !slices.Equal(group, want) {
		t.Fatalf("group mounts %q, want %q", group, want)
	}
	// The loader's own preload list, read-only: a program whose environment
	// drops LD_PRELOAD still loads the library.
	if !slices.ContainsFunc(r.Mounts, func(m *pluginapi.Mount) bool {
		return m.HostPath == in.Preload && m.ContainerPath == "/etc/ld.so.preload" && m.ReadOnly
	}) {
		t.Fatalf("no read-only /etc/ld.so.preload mount: %v", r.Mounts)
	}
	if got := PreloadList(in.Library); got != env["LD_PRELOAD"]+"\n" {
		t.Fatalf("preload list %q, LD_PRELOAD %q", got, env["LD_PRELOAD"])
	}
	noList := in
	noList.Preload = ""
	if _, err := noList.Response(c, gpus, g); err == nil || !strings.Contains(err.Error(), "preload") {
		t.Fatalf("library without a preload list: %v", err)
	}
	unhealthy := gpus[uuid(3)]
	unhealthy.Healthy = false
	gpus[uuid(3)] = unhealthy
	if _, err := in.Response(c, gpus, g); err == nil || !strings.Contains(err.Error(), "unhealthy") {
		t.Fatalf("unhealthy GPU: %v", err)
	}
	delete(gpus, uuid(1))
	if _, err := in.Response(c, gpus, g); err == nil {
		t.Fatal("unknown GPU accepted")
	}
}

// FuzzGroupName: every pod/container name gives a valid group name.
func FuzzGroupName(f *testing.F) {
	f.Add("trainer-7f9c", "main", "0b3d")
	f.Add("", "", "")
	f.Add(strings.Repeat("A", 300), "--x--", "u")
	f.Fuzz(func(t *testing.T, pod, container, uid string) {
		g := GroupName(Candidate{Name: pod, Container: container, UID: types.UID(uid)})
		if err := paths.ValidateGroup(g); err != nil {
			t.Fatalf("GroupName(%q, %q) = %q: %v", pod, container, g, err)
		}
	})
}

// FuzzParseSlotID: never panics; accepted IDs round-trip.
func FuzzParseSlotID(f *testing.F) {
	f.Add("GPU-1234::0")
	f.Add("::1")
	f.Add("GPU-a::01")
	f.Add("GPU-a::-1")
	f.Fuzz(func(t *testing.T, id string) {
		u, k, err := ParseSlotID(id)
		if err != nil {
			if !errors.Is(err, ErrInvalidSlot) {
				t.Fatalf("error %v does not wrap ErrInvalidSlot", err)
			}
			return
		}
		if SlotID(u, k) != id {
			t.Fatalf("%q -> %q %d -> %q", id, u, k, SlotID(u, k))
		}
	})
}
