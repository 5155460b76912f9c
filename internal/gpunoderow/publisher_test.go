package gpunoderow

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuslice/gpuslice/pkg/api"
)

type failingGPUs struct{ err error }

func (f failingGPUs) Devices(context.Context) ([]Device, error) { return nil, f.err }

type okGPUs struct{}

func (okGPUs) Devices(context.Context) ([]Device, error) {
	return []Device{{Index: 0, UUID: "GPU-0", MemoryBytes: 1 << 30, Healthy: true}}, nil
}

type noHeld struct{}

func (noHeld) Held(context.Context) (map[int32]Held, error) { return nil, nil }

// A driver that fails is published as NotReady (with the error), and what
// the publisher observed says so; the call still reports the failure.
func TestPublishNotReadyOnDriverFailure(t *testing.T) {
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{api.GPUNodeGVR: api.GPUNodeKind + "List"})
	var seen []api.NodeState
	p := &Publisher{Client: dyn, Node: "n1", Held: noHeld{}, Clock: clocktesting.NewFakePassiveClock(time.Unix(1e9, 0)), Period: time.Second,
		State:   func() (api.NodeState, string) { return api.NodeWorking, "" },
		Observe: func(s api.NodeState, devs []Device) { seen = append(seen, s) }}
	read := func() api.GPUNodeStatus {
		t.Helper()
		u, err := dyn.Resource(api.GPUNodeGVR).Get(context.Background(), "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var st api.GPUNodeStatus
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object["status"].(map[string]any), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	p.GPUs = okGPUs{}
	if err := p.PublishOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := read(); st.State != api.NodeWorking || len(st.GPUs) != 1 {
		t.Fatalf("working: %+v", st)
	}
	p.GPUs = failingGPUs{errors.New("NVML_ERROR_GPU_IS_LOST")}
	if err := p.PublishOnce(context.Background()); err == nil {
		t.Fatal("driver failure not reported")
	}
	st := read()
	if st.State != api.NodeNotReady || len(st.GPUs) != 0 || st.Message == "" {
		t.Fatalf("after a driver failure: %+v", st)
	}
	if len(seen) != 2 || seen[1] != api.NodeNotReady {
		t.Fatalf("observed %v", seen)
	}
}
