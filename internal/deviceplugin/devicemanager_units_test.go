package deviceplugin

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// unitsPod asks units of one GPU (gpu: its assigned index), with
// gpuslice.io/gpu: 1 too when count is set.
func unitsPod(name string, units int64, gpu int32, count bool) *corev1.Pod {
	lim := corev1.ResourceList{api.ResourceUnits: *resource.NewQuantity(units, resource.DecimalSI), api.ResourceMemory: resource.MustParse("1Gi")}
	if count {
		lim[api.ResourceGPU] = resource.MustParse("1")
	}
	a := api.Assignment{Version: api.AssignmentVersion, Node: "n1", Containers: []api.ContainerAssignment{{Name: "c0",
		GPUs: []api.GPUAssignment{{Index: gpu, UUID: uuid(gpu), Units: units, MemoryBytes: 1 << 30}}}}}
	raw, err := a.Marshal()
	if err != nil {
		panic(err)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
		Annotations: map[string]string{api.AnnotationAssignment: string(raw)}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c0", Resources: corev1.ResourceRequirements{Limits: lim}}}}}
}

func waitUnits(t *testing.T, m *devicemanager.ManagerImpl, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		_, alloc, _ := m.GetCapacity(klog.Background())
		if q, ok := alloc[api.ResourceUnits]; ok && q.Value() == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("device manager never saw %d unit slots", want)
}

// peerUnits: shares asked by units alone are allocated (library and group
// env, the assigned GPU's node); four 25-unit shares fill a GPU's 100 unit
// slots, and a share with gpuslice.io/gpu: 1 too gets both allocations.
func peerUnits(t *testing.T, ctx context.Context, p *peer, be *dmBackend, held ...*corev1.Pod) {
	cfg := Config{ResourceName: string(api.ResourceUnits), PluginDir: pluginapi.DevicePluginPath, SocketName: "gpuslice-units.sock",
		SlotsPerGPU: api.DefaultUnitsPerGPU, Units: true, CheckEvery: 50 * time.Millisecond}
	plug, err := New(cfg, be, fourGPUs())
	if err != nil {
		t.Fatal(err)
	}
	uctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- plug.Run(uctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitUnits(t, p.m, 4*api.DefaultUnitsPerGPU)
	pods := append([]*corev1.Pod(nil), held...)
	for i := range 4 {
		u := unitsPod(fmt.Sprint("u", i), 25, 2, false)
		pods = append(pods, u)
		p.setPods(pods...)
		if err := p.m.Allocate(context.Background(), u, &u.Spec.Containers[0], lifecycle.AddOperation); err != nil {
			t.Fatalf("allocate units-only share %d: %v", i, err)
		}
		expectDevices(t, p.m, u, "/dev/nvidia2")
		if n := len(p.m.GetDevices(string(u.UID), "c0")[string(api.ResourceUnits)]); n != 25 {
			t.Fatalf("share %d holds %d unit slots", i, n)
		}
	}
	both := unitsPod("both", 40, 1, true)
	p.setPods(append(pods, both)...)
	if err := p.m.Allocate(context.Background(), both, &both.Spec.Containers[0], lifecycle.AddOperation); err != nil {
		t.Fatalf("allocate gpu + units: %v", err)
	}
	expectDevices(t, p.m, both, "/dev/nvidia1")
	// A share the books never placed (GPU 2 is full): no unit slots there.
	over := unitsPod("over", 5, 2, false)
	p.setPods(append(pods, both, over)...)
	if err := p.m.Allocate(context.Background(), over, &over.Spec.Containers[0], lifecycle.AddOperation); err == nil {
		t.Fatal("a fifth share got unit slots on a full GPU")
	}
	p.setPods(held...)
}
