package sched

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// writerDouble stands in for the API server's Binding endpoint.
type writerDouble struct {
	fail  error
	bound map[string]*api.Assignment
}

func (w *writerDouble) Bind(_ context.Context, pod *corev1.Pod, _ string, a *api.Assignment) error {
	if w.fail != nil {
		return w.fail
	}
	w.bound[pod.Name] = a
	return nil
}

func (w *writerDouble) Annotate(context.Context, *corev1.Pod, *api.Assignment) error { return nil }

type eventsDouble struct{ invalid []string }

func (e *eventsDouble) InvalidRequest(_ context.Context, pod *corev1.Pod, err error) {
	e.invalid = append(e.invalid, pod.Name+": "+err.Error())
}
func (e *eventsDouble) InvalidAssignment(context.Context, *corev1.Pod, error) {}
func (e *eventsDouble) Reserved(*corev1.Pod, string)                          {}

func gpuPod(name string, units int64) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: ktypes.UID("uid-" + name)}}
	p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{api.ResourceUnits: *resource.NewQuantity(units, resource.DecimalSI)}}}}
	return p
}

func nodeInfo(name string) fwk.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return ni
}

// schedule runs one pod through the plugin's cycle on node n1, as the
// framework would, and returns the final status.
func schedule(p *Plugin, pod *corev1.Pod) *fwk.Status {
	ctx := context.Background()
	state := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, state, pod, nil); !st.IsSuccess() {
		return st
	}
	if st := p.Filter(ctx, state, pod, nodeInfo("n1")); !st.IsSuccess() {
		return st
	}
	if st := p.Reserve(ctx, state, pod, "n1"); !st.IsSuccess() {
		return st
	}
	if st := p.Bind(ctx, state, pod, "n1"); !st.IsSuccess() {
		p.Unreserve(ctx, state, pod, "n1")
		return st
	}
	return nil
}

func TestPluginCycle(t *testing.T) {
	l, _ := newBooks(t)
	if err := setGPUNode(l, gpuNode("n1", 1, t0)); err != nil {
		t.Fatal(err)
	}
	w := &writerDouble{bound: map[string]*api.Assignment{}}
	ev := &eventsDouble{}
	p := &Plugin{alloc: l, writer: w, events: ev, wait: &waiters{}, candidates: 8}
	if st := schedule(p, gpuPod("a", 60)); st != nil {
		t.Fatalf("a: %v", st)
	}
	if a := w.bound["a"]; a == nil || a.Containers[0].GPUs[0].Units != 60 {
		t.Fatalf("a bound with %+v", w.bound["a"])
	}
	// A failed binding is unreserved: the GPU is free again.
	w.fail = errors.New("binding refused")
	if st := schedule(p, gpuPod("b", 40)); st.IsSuccess() || !strings.Contains(st.Message(), "binding refused") {
		t.Fatalf("b: %v", st)
	}
	if u := l.Usage("n1"); u[0].Units != 60 {
		t.Fatalf("after failed bind: %+v", u)
	}
	w.fail = nil
	// Rejected in PreFilter (no node fits by the books), the pod is still
	// told each node's reason, as Filter would tell it.
	if st := schedule(p, gpuPod("c", 50)); st.IsSuccess() || !strings.Contains(st.Message(), "needs 1 GPUs with 50 units") ||
		!strings.Contains(st.Message(), "node n1") {
		t.Fatalf("c should not fit: %v", st)
	}
	drain := gpuNode("n1", 1, t0)
	drain.Status.State = v1alpha2.NodeDraining
	if err := setGPUNode(l, drain); err != nil {
		t.Fatal(err)
	}
	if st := schedule(p, gpuPod("e", 10)); st.IsSuccess() || !strings.Contains(st.Message(), "is Draining") {
		t.Fatalf("e on a draining node: %v", st)
	}
	if err := setGPUNode(l, gpuNode("n1", 1, t0)); err != nil {
		t.Fatal(err)
	}
	if st := schedule(p, gpuPod("d", 40)); st != nil {
		t.Fatalf("d: %v", st)
	}
	// A pod without GPUs is skipped; a malformed one gets an event.
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	if _, st := p.PreFilter(context.Background(), framework.NewCycleState(), plain, nil); !st.IsSkip() {
		t.Fatalf("plain pod: %v", st)
	}
	bad := gpuPod("bad", 10)
	bad.Annotations = map[string]string{api.AnnotationPlacement: "nearest"}
	if st := schedule(p, bad); st.Code() != fwk.UnschedulableAndUnresolvable || len(ev.invalid) != 1 {
		t.Fatalf("bad: %v, events %v", st, ev.invalid)
	}
}
