package alloc

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// The kubelet has api.MaxContainersPerGPU slots per GPU: the books never
// place more containers than that on one GPU, even when memory-only shares
// would fit by units and memory.
func TestContainersPerGPUMatchKubeletSlots(t *testing.T) {
	b := NewBooks(cfg())
	setNode(b, node("n1", 1))
	tiny := &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: 1, MemoryBytes: 1 << 20}}}
	for i := range api.MaxContainersPerGPU {
		mustReserve(t, b, fmt.Sprintf("p%d", i), tiny)
	}
	if u := b.Usage("n1")[0]; u.Containers != api.MaxContainersPerGPU {
		t.Fatalf("containers %d", u.Containers)
	}
	_, err := b.Fit("n1", tiny, t0)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("holding %d containers", api.MaxContainersPerGPU)) {
		t.Fatalf("fit of one more: %v", err)
	}
	// Two containers of one pod on a GPU with one slot left: refused whole.
	b.Release("p0")
	two := &api.PodRequest{Containers: []api.ContainerRequest{{Name: "a", Count: 1, MemoryBytes: 1 << 20}, {Name: "b", Count: 1, MemoryBytes: 1 << 20}}}
	if _, err := b.Fit("n1", two, t0); err == nil {
		t.Fatal("two containers fitted into one slot")
	}
	a := &api.Assignment{Version: api.AssignmentVersion, Node: "n1", Containers: []api.ContainerAssignment{
		{Name: "a", GPUs: []api.GPUAssignment{{Index: 0, UUID: "GPU-n1-0", MemoryBytes: 1 << 20}}},
		{Name: "b", GPUs: []api.GPUAssignment{{Index: 0, UUID: "GPU-n1-0", MemoryBytes: 1 << 20}}}}}
	if err := b.Reserve("two", a); err == nil {
		t.Fatal("reserve of two containers into one slot")
	}
	mustReserve(t, b, "p0", tiny)
	if o := b.Overcommitted(); len(o) != 0 {
		t.Fatalf("overcommitted %v", o)
	}
	for i := range api.MaxContainersPerGPU {
		b.Release(fmt.Sprintf("p%d", i))
	}
	if u := b.Usage("n1"); len(u) != 0 {
		t.Fatalf("usage left %+v", u)
	}
}
