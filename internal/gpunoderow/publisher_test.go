package gpunoderow

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuslice/gpuslice/pkg/api"
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

type utilGPUs struct{ util *int32 }

func (u utilGPUs) Devices(context.Context) ([]Device, error) {
	return []Device{{Index: 0, UUID: "GPU-0", MemoryBytes: 1 << 30, Healthy: true, UtilizationPercent: *u.util}}, nil
}

// The status is written only when it changes; every publication renews the
// node's Lease with the clock's time (on the fakes: the writes counted as
// the actions the clientsets saw).
func TestPublishWritesOnlyOnChange(t *testing.T) {
	cs, kube := fake.NewSimpleClientset(), kubefake.NewSimpleClientset()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1e9, 0))
	util := int32(0)
	p := &Publisher{Client: cs, Leases: kube.CoordinationV1(), Node: "n1", GPUs: utilGPUs{&util}, Held: noHeld{},
		Clock: clk, Period: 10 * time.Second}
	writes := func() (status, lease int) {
		for _, a := range cs.Actions() {
			if a.GetVerb() == "create" || a.GetVerb() == "update" {
				status++
			}
		}
		for _, a := range kube.Actions() {
			if a.GetVerb() == "create" || a.GetVerb() == "update" {
				lease++
			}
		}
		return status, lease
	}
	for i := 0; i < 30; i++ {
		if err := p.PublishOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		clk.SetTime(clk.Now().Add(10 * time.Second))
	}
	if s, l := writes(); s != 2 || l != 30 { // create + first status; one Lease write per publication
		t.Fatalf("%d GPUNode writes, %d Lease writes over 30 unchanged publications; want 2 and 30", s, l)
	}
	le, err := kube.CoordinationV1().Leases(api.LeaseNamespace).Get(context.Background(), api.LeaseName("n1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if le.Spec.RenewTime.Unix() != 1e9+290 || *le.Spec.LeaseDurationSeconds != 40 || *le.Spec.HolderIdentity != "n1" || le.Labels[api.LabelLeaseNode] != "n1" {
		t.Fatalf("lease %+v", le)
	}
	util = 50
	if err := p.PublishOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s, _ := writes(); s != 3 {
		t.Fatalf("%d GPUNode writes after a change, want 3", s)
	}
	n, err := cs.GpusliceV1alpha2().GPUNodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil || n.Status.GPUs[0].UtilizationPercent != 50 || n.Status.UpdateTime.Unix() != 1e9+300 {
		t.Fatalf("row after the change: %+v, %v", n, err)
	}
}

func TestSameStatus(t *testing.T) {
	a, err := Status([]Device{{Index: 0, UUID: "a", MemoryBytes: 80 << 30, Healthy: true}}, nil, v1alpha2.NodeWorking, "")
	if err != nil {
		t.Fatal(err)
	}
	b := *a.DeepCopy()
	b.UpdateTime = metav1.Now()
	b.GPUs[0].Memory = resource.MustParse("80Gi") // same quantity, parsed
	if !SameStatus(a, b) {
		t.Fatal("equal statuses differ")
	}
	for name, mut := range map[string]func(*v1alpha2.GPUNodeStatus){
		"state":   func(s *v1alpha2.GPUNodeStatus) { s.State = v1alpha2.NodeDraining },
		"memory":  func(s *v1alpha2.GPUNodeStatus) { s.GPUs[0].MemoryFree = resource.MustParse("1Gi") },
		"message": func(s *v1alpha2.GPUNodeStatus) { s.Message = "x" },
		"gpus":    func(s *v1alpha2.GPUNodeStatus) { s.GPUs = nil },
	} {
		c := *a.DeepCopy()
		mut(&c)
		if SameStatus(a, c) {
			t.Errorf("%s: change not seen", name)
		}
	}
}
