package gpunoderow

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/pkg/generated/clientset/versioned/fake"
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
	cs := fake.NewSimpleClientset()
	var seen []v1alpha2.NodeState
	p := &Publisher{Client: cs, Node: "n1", Held: noHeld{}, Clock: clocktesting.NewFakePassiveClock(time.Unix(1e9, 0)), Period: time.Second,
		State:   func() (v1alpha2.NodeState, string) { return v1alpha2.NodeWorking, "" },
		Observe: func(s v1alpha2.NodeState, devs []Device) { seen = append(seen, s) }}
	read := func() v1alpha2.GPUNodeStatus {
		t.Helper()
		n, err := cs.GpusliceV1alpha2().GPUNodes().Get(context.Background(), "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Status
	}
	p.GPUs = okGPUs{}
	if err := p.PublishOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := read(); st.State != v1alpha2.NodeWorking || len(st.GPUs) != 1 {
		t.Fatalf("working: %+v", st)
	}
	p.GPUs = failingGPUs{errors.New("NVML_ERROR_GPU_IS_LOST")}
	if err := p.PublishOnce(context.Background()); err == nil {
		t.Fatal("driver failure not reported")
	}
	st := read()
	if st.State != v1alpha2.NodeNotReady || len(st.GPUs) != 0 || st.Message == "" {
		t.Fatalf("after a driver failure: %+v", st)
	}
	if len(seen) != 2 || seen[1] != v1alpha2.NodeNotReady {
		t.Fatalf("observed %v", seen)
	}
}
