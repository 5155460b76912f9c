package gpunoderow

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

func TestStatus(t *testing.T) {
	devs := []Device{
		{Index: 1, UUID: "b", Model: "m", MemoryBytes: 100, Healthy: false, UtilizationPercent: 120},
		{Index: 0, UUID: "a", Model: "m", MemoryBytes: 100, UnitsTotal: 200, Healthy: true, UtilizationPercent: 30, UnscheduledProcesses: 2},
	}
	st, err := Status(devs, map[int32]Held{0: {Units: 50, MemoryBytes: 40}, 1: {Units: 500, MemoryBytes: 1}}, v1alpha2.NodeDraining, "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	g0, g1 := st.GPUs[0], st.GPUs[1]
	if g0.Index != 0 || g0.UnitsTotal != 200 || g0.UnitsFree != 150 || g0.MemoryFree.Value() != 60 || g0.Health != v1alpha2.GPUHealthy || g0.UnscheduledProcesses != 2 {
		t.Fatalf("gpu0 %+v", g0)
	}
	if g1.UnitsTotal != api.DefaultUnitsPerGPU || g1.UnitsFree != 0 || g1.Health != v1alpha2.GPUUnhealthy || g1.UtilizationPercent != 100 {
		t.Fatalf("gpu1 %+v", g1)
	}
	if st.State != v1alpha2.NodeDraining || st.Message != "maintenance; GPU 1 (b): unhealthy" || st.Summary.GPUs != 2 || st.Summary.HealthyGPUs != 1 || st.Summary.UnitsFree != 150 {
		t.Fatalf("status %+v", st)
	}
	if _, err := Status([]Device{{Index: 0, UUID: "a", MemoryBytes: 1}, {Index: 0, UUID: "b", MemoryBytes: 1}}, nil, v1alpha2.NodeWorking, ""); !errors.Is(err, v1alpha2.ErrInvalidGPUNode) {
		t.Fatalf("duplicate index: %v", err)
	}
}

func TestHealthState(t *testing.T) {
	ok := v1alpha2.GPU{Index: 0, UUID: "a", Health: v1alpha2.GPUHealthy}
	sick := v1alpha2.GPU{Index: 1, UUID: "b", Health: v1alpha2.GPUUnhealthy, HealthMessage: "XID 79 (GPU has fallen off the bus)"}
	sick2 := v1alpha2.GPU{Index: 2, UUID: "c", Health: v1alpha2.GPUUnhealthy}
	for _, tc := range []struct {
		name      string
		state     v1alpha2.NodeState
		msg       string
		gpus      []v1alpha2.GPU
		wantState v1alpha2.NodeState
		wantMsg   string
	}{
		{"all healthy", v1alpha2.NodeWorking, "", []v1alpha2.GPU{ok}, v1alpha2.NodeWorking, ""},
		{"no GPUs", v1alpha2.NodeWorking, "", nil, v1alpha2.NodeWorking, ""},
		{"one of two", v1alpha2.NodeWorking, "", []v1alpha2.GPU{ok, sick}, v1alpha2.NodeWorking, "GPU 1 (b): XID 79 (GPU has fallen off the bus)"},
		{"none healthy", v1alpha2.NodeWorking, "", []v1alpha2.GPU{sick, sick2}, v1alpha2.NodeNotReady,
			"no healthy GPU; GPU 1 (b): XID 79 (GPU has fallen off the bus); GPU 2 (c): unhealthy"},
		{"draining stays draining", v1alpha2.NodeDraining, "the node is cordoned", []v1alpha2.GPU{sick}, v1alpha2.NodeDraining,
			"the node is cordoned; GPU 1 (b): XID 79 (GPU has fallen off the bus)"},
		{"draining healthy", v1alpha2.NodeDraining, "the node is cordoned", []v1alpha2.GPU{ok}, v1alpha2.NodeDraining, "the node is cordoned"},
	} {
		st, msg := healthState(tc.state, tc.msg, tc.gpus)
		if st != tc.wantState || msg != tc.wantMsg {
			t.Errorf("%s: %s %q, want %s %q", tc.name, st, msg, tc.wantState, tc.wantMsg)
		}
	}
	long := make([]v1alpha2.GPU, 16)
	for i := range long {
		long[i] = v1alpha2.GPU{Index: int32(i), UUID: strings.Repeat("u", 40), Health: v1alpha2.GPUUnhealthy, HealthMessage: strings.Repeat("x", 200)}
	}
	if _, msg := healthState(v1alpha2.NodeWorking, "", long); len(msg) > 1003 {
		t.Errorf("message of %d bytes: the CRD allows 1024", len(msg))
	}
}

func TestSum(t *testing.T) {
	a := &api.Assignment{Version: api.AssignmentVersion, Node: "n1", Containers: []api.ContainerAssignment{
		{Name: "c", GPUs: []api.GPUAssignment{{Index: 0, UUID: "a", Units: 30, MemoryBytes: 5}, {Index: 1, UUID: "b", Units: 100, MemoryBytes: 9, Exclusive: true}}},
	}}
	raw, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	pod := func(name, ann string, phase corev1.PodPhase) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{api.AnnotationAssignment: ann}}}
		p.Status.Phase = phase
		return p
	}
	other := strings.Replace(string(raw), `"node":"n1"`, `"node":"n2"`, 1)
	// Preempted: being deleted, its container stopped (holds nothing) or
	// still stopping (holds its share until it stops).
	preempted := func(name string, stopped bool) corev1.Pod {
		p := pod(name, string(raw), corev1.PodRunning)
		now := metav1.Now()
		p.DeletionTimestamp = &now
		p.Spec.Containers = []corev1.Container{{Name: "c"}}
		st := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		if stopped {
			st = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}}
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: st}}
		return p
	}
	got := Sum(context.Background(), "n1", []corev1.Pod{pod("a", string(raw), corev1.PodRunning), preempted("gone", true)})
	if got[0] != (Held{Units: 30, MemoryBytes: 5}) {
		t.Fatalf("a preempted pod whose container stopped still holds: %+v", got)
	}
	got = Sum(context.Background(), "n1", []corev1.Pod{pod("a", string(raw), corev1.PodRunning), preempted("stopping", false)})
	if got[0] != (Held{Units: 60, MemoryBytes: 10}) {
		t.Fatalf("a preempted pod still stopping holds nothing: %+v", got)
	}
	got = Sum(context.Background(), "n1", []corev1.Pod{
		pod("a", string(raw), corev1.PodRunning), pod("b", string(raw), corev1.PodPending),
		pod("done", string(raw), corev1.PodSucceeded), pod("bad", "{", corev1.PodRunning), pod("moved", other, corev1.PodRunning),
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
	})
	if got[0] != (Held{Units: 60, MemoryBytes: 10}) || got[1] != (Held{Units: 200, MemoryBytes: 18}) || len(got) != 2 {
		t.Fatalf("sum = %+v", got)
	}
}

// nvmlDouble is a test double at the GPU boundary: two devices, the second
// failing its utilization query.
type nvmlDouble struct{ gpu.NVML }

func (nvmlDouble) Count() (int, error) { return 2, nil }
func (nvmlDouble) Device(i int) (gpu.Device, error) {
	return gpu.Device{Index: i, UUID: []string{"GPU-a", "GPU-b"}[i], Name: "sim", MemoryTotal: 1 << 30}, nil
}
func (nvmlDouble) Memory(int) (gpu.Memory, error) { return gpu.Memory{Total: 1 << 30}, nil }
func (nvmlDouble) Utilization(i int) (gpu.Utilization, error) {
	if i == 1 {
		return gpu.Utilization{}, gpu.ErrNVML
	}
	return gpu.Utilization{GPU: 42}, nil
}
func (nvmlDouble) Processes(int) ([]gpu.Process, error) {
	return []gpu.Process{{PID: 10}, {PID: 11}, {PID: 12}}, nil
}

func TestNVMLReader(t *testing.T) {
	r := NVMLReader{NVML: nvmlDouble{}, Owned: func(_ int, pid uint32) bool { return pid == 10 }}
	devs, err := r.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[0].UtilizationPercent != 42 || !devs[0].Healthy || devs[0].UnscheduledProcesses != 2 || devs[1].Healthy || devs[0].MemoryBytes != 1<<30 {
		t.Fatalf("devices %+v", devs)
	}
}

// lostDouble: a third GPU NVML can no longer describe.
type lostDouble struct{ nvmlDouble }

func (lostDouble) Count() (int, error) { return 3, nil }
func (d lostDouble) Device(i int) (gpu.Device, error) {
	if i == 2 {
		return gpu.Device{}, gpu.ErrNVML
	}
	return d.nvmlDouble.Device(i)
}

func TestNVMLReaderHealth(t *testing.T) {
	known := []gpu.Device{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}, {Index: 2, UUID: "GPU-c", Name: "sim", MemoryTotal: 1 << 30}}
	r := NVMLReader{NVML: lostDouble{}, Known: known, Health: func(uuid string) (bool, string) {
		if uuid == "GPU-a" {
			return false, "XID 79"
		}
		return true, ""
	}}
	devs, err := r.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 3 || devs[0].Healthy || devs[0].HealthMessage != "XID 79" {
		t.Fatalf("GPU 0: %+v", devs)
	}
	if devs[1].Healthy || !strings.HasPrefix(devs[1].HealthMessage, "NVML query failed: ") {
		t.Fatalf("GPU 1 (utilization fails): %+v", devs[1])
	}
	if c := devs[2]; c.Healthy || c.UUID != "GPU-c" || c.MemoryBytes != 1<<30 || !strings.HasPrefix(c.HealthMessage, "NVML cannot describe the GPU: ") {
		t.Fatalf("GPU 2 (lost): %+v", c)
	}
	if _, err := (NVMLReader{NVML: lostDouble{}}).Devices(context.Background()); !errors.Is(err, gpu.ErrNVML) {
		t.Fatalf("a GPU not known at start that NVML cannot describe: %v", err)
	}
}
