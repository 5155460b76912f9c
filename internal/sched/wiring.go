package sched

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"

	"github.com/gpuslice/gpuslice/internal/resize"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/pkg/generated/clientset/versioned"
	"github.com/gpuslice/gpuslice/pkg/generated/informers/externalversions"
)

// AssignmentWriter stores an assignment on its pod.
type AssignmentWriter interface {
	// Bind binds pod to node with the assignment annotation, atomically.
	Bind(ctx context.Context, pod *corev1.Pod, node string, a *api.Assignment) error
	// Annotate writes the annotation on an already bound pod.
	Annotate(ctx context.Context, pod *corev1.Pod, a *api.Assignment) error
}

// Events reports bad input on the objects concerned.
type Events interface {
	InvalidRequest(ctx context.Context, pod *corev1.Pod, err error)
	InvalidAssignment(ctx context.Context, pod *corev1.Pod, err error)
	// Reserved: a node is reserved for a pod waiting for whole devices.
	Reserved(pod *corev1.Pod, node string)
}

// Event reasons.
const (
	ReasonInvalidRequest    = "InvalidGPURequest"
	ReasonInvalidAssignment = "InvalidGPUAssignment"
	ReasonReserved          = "DevicesReserved"
)

// New is the plugin factory for app.WithPlugin in a scheduler without leader
// election: the resize controller starts at once (see Factory).
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	l := NewLeader()
	l.Lead()
	return newPlugin(ctx, obj, h, l.Leading(), nil)
}

func newPlugin(ctx context.Context, obj runtime.Object, h fwk.Handle, leading <-chan struct{}, steering *Steering) (fwk.Plugin, error) {
	st, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	gc, err := versioned.NewForConfig(h.KubeConfig())
	if err != nil {
		return nil, fmt.Errorf("%s: GPUNode client: %w", Name, err)
	}
	cfg := st.Alloc
	books := NewBooks(cfg, clock.RealClock{})
	sr := steering.of(h.ProfileName())
	if sr != nil {
		sr.books.Store(books)
	}
	ev := recorderEvents{rec: h.EventRecorder()}
	pr := newPreemptor(h, books)
	w := &waiters{activator: h, helps: func(parked *corev1.Pod, freed types.UID) bool {
		return !pr.rec.waitsOnOthers(parked.UID, freed, time.Now())
	}}
	reg, err := h.SharedInformerFactory().Core().V1().Pods().Informer().AddEventHandler(podHandler(ctx, books, ev, w, pr))
	if err != nil {
		return nil, fmt.Errorf("%s: pod handler: %w", Name, err)
	}
	pm, err := newPluginMetrics()
	if err != nil {
		klog.FromContext(ctx).Info("plugin metrics already registered by another profile; this one's are not served", "err", err)
	}
	p := &Plugin{alloc: books, writer: podPatcher{client: h.ClientSet()}, events: ev, synced: reg.HasSynced, wait: w, candidates: st.CandidateNodes,
		metrics: pm, nominated: h.NominatedPodsForNode}
	p.preempt = pr
	if sr != nil {
		sr.plugin.Store(p)
	}
	if err := watchGPUNodes(ctx, gc, books, w); err != nil {
		return nil, err
	}
	if err := watchLeases(ctx, h.ClientSet(), books, w); err != nil {
		return nil, err
	}
	if err := startResize(ctx, h, resizeBooks{Books: books, ctx: ctx, wait: w}, leading); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("gpuslice plugin ready", "placement", cfg.DefaultPlacement,
		"utilizationThreshold", cfg.UtilizationThreshold, "heartbeatTimeout", cfg.HeartbeatTimeout,
		"allowUnscheduledProcesses", cfg.AllowUnscheduledProcesses, "candidateNodes", st.CandidateNodes)
	return p, nil
}

// startResize runs the resize controller (in-place GPU grants and releases
// for api.AnnotationGPUs) on the scheduler's pod informer and the plugin's
// books, for as long as the scheduler runs, once this replica leads.
func startResize(ctx context.Context, h fwk.Handle, books resizeBooks, leading <-chan struct{}) error {
	c, err := resize.New(resize.Config{Client: h.ClientSet(), Pods: h.SharedInformerFactory().Core().V1().Pods(),
		Books: books, Events: h.EventRecorder()})
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	go func() {
		if !waitLeading(ctx, leading) {
			return
		}
		klog.FromContext(ctx).Info("resize controller starting: this replica leads")
		if err := c.Run(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "resize controller stopped")
		}
	}()
	return nil
}

// podHandler keeps the books in step with bound pods, and wakes parked
// pods when a pod's GPUs are released.
func podHandler(ctx context.Context, l *Books, ev Events, w *waiters, pr *preemptor) cache.ResourceEventHandler {
	rec := pr.rec
	observe := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		if err := l.ObservePod(pod); err != nil {
			ev.InvalidAssignment(ctx, pod, err)
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			w.wakeFor(ctx, pod.UID)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				l.Release(string(pod.UID))
				w.forget(pod)
				rec.forget(pod.UID)
				pr.release.gone(ctx, pod)
				pr.backfill.forget(pod.UID)
				w.wakeFor(ctx, pod.UID)
			}
		},
	}
}

// watchGPUNodes feeds GPUNode rows into the books and waits for the first list.
func watchGPUNodes(ctx context.Context, gc versioned.Interface, l *Books, w *waiters) error {
	logger := klog.FromContext(ctx)
	f := externalversions.NewSharedInformerFactory(gc, 0)
	inf := f.Gpuslice().V1alpha2().GPUNodes().Informer()
	set := func(oldObj, obj any) {
		n, err := gpuNodeFrom(obj)
		if err == nil && unpublished(n) {
			// Created, its status not written yet (the publisher creates
			// the row, then writes gpunodes/status): no node to place on.
			l.RemoveGPUNode(n.Name)
			logger.V(4).Info("GPUNode not published yet", "node", n.Name)
			return
		}
		if err == nil {
			err = l.SetGPUNode(n)
		}
		if err != nil {
			logger.Error(err, "ignoring GPUNode")
			return
		}
		var old *v1alpha2.GPUNode
		if oldObj != nil {
			if o, err := gpuNodeFrom(oldObj); err == nil {
				old = o // a malformed old row leaves old nil: the row counts as new
			}
		}
		if rowMayAdmitMore(old, n) {
			w.wake(ctx)
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { set(nil, obj) },
		UpdateFunc: set,
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if n, err := gpuNodeFrom(obj); err == nil {
				l.RemoveGPUNode(n.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("%s: GPUNode handler: %w", Name, err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return fmt.Errorf("%s: GPUNode informer did not sync: %w", Name, ctx.Err())
	}
	return nil
}

// gpuNodeFrom reads a GPUNode from an informer's object: typed from the
// plugin's own informer, unstructured from kube-scheduler's (the framework
// watches the custom resources plugins register events for through a
// dynamic informer, and hands its objects to the queueing hints).
func gpuNodeFrom(obj any) (*v1alpha2.GPUNode, error) {
	if n, ok := obj.(*v1alpha2.GPUNode); ok {
		return n, nil
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("%w: unexpected object %T", v1alpha2.ErrInvalidGPUNode, obj)
	}
	var n v1alpha2.GPUNode
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &n); err != nil {
		return nil, fmt.Errorf("%w %q: %w", v1alpha2.ErrInvalidGPUNode, u.GetName(), err)
	}
	return &n, nil
}

type podPatcher struct{ client kubernetes.Interface }

// Bind posts a Binding carrying the annotation, conditioned on the pod's UID.
func (w podPatcher) Bind(ctx context.Context, pod *corev1.Pod, node string, a *api.Assignment) error {
	raw, err := a.Marshal()
	if err != nil {
		return err
	}
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			Annotations: map[string]string{api.AnnotationAssignment: string(raw)}},
		Target: corev1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := w.client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bind pod %s/%s to %s: %w", pod.Namespace, pod.Name, node, err)
	}
	return nil
}

// Annotate merge-patches the annotation, conditioned on the pod's UID so a
// recreated pod of the same name is never annotated.
func (w podPatcher) Annotate(ctx context.Context, pod *corev1.Pod, a *api.Assignment) error {
	raw, err := a.Marshal()
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID,
		"annotations": map[string]string{api.AnnotationAssignment: string(raw)},
	}})
	if err != nil {
		return fmt.Errorf("assignment patch: %w", err)
	}
	_, err = w.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("write assignment on pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

type recorderEvents struct{ rec events.EventRecorder }

func (e recorderEvents) InvalidRequest(ctx context.Context, pod *corev1.Pod, err error) {
	klog.FromContext(ctx).V(2).Info("invalid gpuslice request", "pod", klog.KObj(pod), "err", err)
	e.rec.Eventf(pod, nil, corev1.EventTypeWarning, ReasonInvalidRequest, "Scheduling", "%s", err.Error())
}

func (e recorderEvents) InvalidAssignment(ctx context.Context, pod *corev1.Pod, err error) {
	klog.FromContext(ctx).Error(err, "ignoring gpuslice assignment", "pod", klog.KObj(pod))
	e.rec.Eventf(pod, nil, corev1.EventTypeWarning, ReasonInvalidAssignment, "Scheduling", "%s", err.Error())
}

var (
	errNoState   = errors.New("gpuslice: no PreFilter state")
	errNotSynced = errors.New("gpuslice: pod informer not synced")
	errNoRoom    = errors.New("gpuslice: no node has the free GPU capacity the pod requests")
)

// unpublished: a row whose status was never written.
func unpublished(n *v1alpha2.GPUNode) bool {
	return n.Status.State == "" && n.Status.UpdateTime.IsZero() && len(n.Status.GPUs) == 0
}

func (e recorderEvents) Reserved(pod *corev1.Pod, node string) {
	e.rec.Eventf(pod, nil, corev1.EventTypeNormal, ReasonReserved, "Scheduling",
		"node %s reserved: pods needing only shares go elsewhere until its devices are free", node)
}
