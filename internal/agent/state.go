package agent

import (
	"context"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpunoderow"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/pkg/generated/clientset/versioned"
)

// drainState is the node's state from what the API server says: Draining
// when the Node is cordoned or its GPUNode carries api.AnnotationDrain
// "true"; else Working.
func drainState(cordoned bool, gpuNodeAnnotations map[string]string) (v1alpha2.NodeState, string) {
	switch {
	case cordoned:
		return v1alpha2.NodeDraining, "the node is cordoned"
	case gpuNodeAnnotations[api.AnnotationDrain] == "true":
		return v1alpha2.NodeDraining, "the GPUNode is annotated " + api.AnnotationDrain + "=true"
	}
	return v1alpha2.NodeWorking, ""
}

// stateReader reads the node's drain state before each publication; a
// failed read keeps the last state.
type stateReader struct {
	ctx  context.Context
	cs   kubernetes.Interface
	gc   versioned.Interface
	node string

	mu         sync.Mutex
	state      v1alpha2.NodeState
	msg        string
	cordoned   bool
	annotation map[string]string
}

func (s *stateReader) read() (v1alpha2.NodeState, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, err := s.cs.CoreV1().Nodes().Get(s.ctx, s.node, metav1.GetOptions{}); err == nil {
		s.cordoned = n.Spec.Unschedulable
	} else {
		klog.FromContext(s.ctx).V(2).Info("read node for its drain state", "err", err)
	}
	if g, err := s.gc.GpusliceV1alpha2().GPUNodes().Get(s.ctx, s.node, metav1.GetOptions{}); err == nil {
		s.annotation = g.GetAnnotations()
	}
	s.state, s.msg = drainState(s.cordoned, s.annotation)
	return s.state, s.msg
}

// pluginHealth marks the device plugins' GPUs healthy only while the node
// is Working, the last measurement (the publisher's) called the GPU healthy
// and the health monitor (XID events, queries) does, so the kubelet admits no
// new pod onto a Draining, NotReady or unhealthy GPU (running pods keep their
// devices). Either source re-evaluates at once.
type pluginHealth struct {
	gpus    []gpuset.GPU
	plugins []*deviceplugin.Plugin
	healthy func(uuid string) bool // the monitor's view; nil: healthy
	mu      sync.Mutex
	state   v1alpha2.NodeState  // "" before the first publication: Working
	devs    []gpunoderow.Device // nil before the first publication: all healthy
	last    []gpuset.GPU
}

// observe takes a published state and the GPUs measured.
func (h *pluginHealth) observe(state v1alpha2.NodeState, devs []gpunoderow.Device) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state, h.devs = state, append(make([]gpunoderow.Device, 0, len(devs)), devs...)
	h.refreshLocked()
}

// refresh re-evaluates after a health change.
func (h *pluginHealth) refresh() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refreshLocked()
}

func (h *pluginHealth) refreshLocked() {
	out := advertised(h.gpus, h.state, h.devs, h.healthy)
	if slices.Equal(out, h.last) {
		return
	}
	h.last = out
	for _, p := range h.plugins {
		p.SetGPUs(out)
	}
}

// advertised is gpus with Healthy = state is Working (or not yet published),
// devs (the last measurement; nil: none yet) call the GPU healthy, and so
// does healthy (nil: no monitor).
func advertised(gpus []gpuset.GPU, state v1alpha2.NodeState, devs []gpunoderow.Device, healthy func(string) bool) []gpuset.GPU {
	ok := map[string]bool{}
	for _, d := range devs {
		ok[d.UUID] = d.Healthy
	}
	out := slices.Clone(gpus)
	for i := range out {
		u := out[i].UUID
		out[i].Healthy = (state == "" || state == v1alpha2.NodeWorking) && (devs == nil || ok[u]) && (healthy == nil || healthy(u))
	}
	return out
}
