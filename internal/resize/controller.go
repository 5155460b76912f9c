package resize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// ErrBooksBehind: the books have not seen the pod's current assignment yet
// (the informer feeding them lags the controller's lister); retry shortly.
var ErrBooksBehind = errors.New("allocation books are behind the pod's assignment")

// ErrNoRoom: a share change does not fit its GPUs; nothing was booked.
var ErrNoRoom = errors.New("the GPU cannot fit the asked share")

// Books are the allocation books the controller shares with the scheduler
// plugin (internal/sched), so a GPU is never both granted to a resize and
// placed for a new pod: grants are booked before the assignment is written
// and rolled back when the write fails.
type Books interface {
	// BeginResize atomically checks that the books hold the pod's current
	// assignment from (annotation value fromRaw; else ErrBooksBehind),
	// lets plan choose among the node's free whole GPUs, and books both
	// from and plan's result until EndResize. A nil plan result books
	// nothing and is returned as nil.
	BeginResize(uid, fromRaw string, from *api.Assignment, plan func(free []v1alpha2.GPU) *api.Assignment) (*api.Assignment, error)
	// EndResize settles a begun resize: written, the books keep the new
	// assignment (annotation value raw) and drop the released GPUs;
	// otherwise they return to what the pod's annotation says.
	EndResize(uid, raw string, written bool)
	// BeginShareResize atomically checks that the books hold the pod's
	// current assignment (fromRaw; else ErrBooksBehind) and that its GPUs
	// fit to (else ErrNoRoom), and books both until EndResize.
	BeginShareResize(uid, fromRaw string, from, to *api.Assignment) error
}

// Controller grants and releases whole GPUs of running pods. It runs inside
// gpuslice-scheduler (started by the GPUSlice plugin) on the scheduler's
// pod informer and books.
type Controller struct {
	client   kubernetes.Interface
	books    Books
	events   events.EventRecorder
	resync   time.Duration
	pods     listersv1.PodLister
	synced   cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	mu       sync.Mutex
	reported map[types.UID]string // last Event message per pod
	// wanting holds the keys of the pods that ask for a change (the
	// resync's work: re-examining every pod of a large cluster each
	// second cost the scheduler more than the pods asking for one).
	wanting map[string]struct{}
}

// Config wires a Controller.
type Config struct {
	Client kubernetes.Interface
	// Pods is the (shared) pod informer; the controller adds its handler.
	Pods  coreinformers.PodInformer
	Books Books
	// Events receives GPUResized, GPUResizePartial and GPUResizeInvalid;
	// nil: none.
	Events events.EventRecorder
	// Resync re-examines every resizable pod this often (GPUs freed by
	// other pods reach short pods this way); 0: 1s.
	Resync time.Duration
}

// New registers the controller's pod handler; Run starts it.
func New(cfg Config) (*Controller, error) {
	c := &Controller{client: cfg.Client, books: cfg.Books, events: cfg.Events, resync: cfg.Resync,
		pods: cfg.Pods.Lister(), reported: map[types.UID]string{}, wanting: map[string]struct{}{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
	if c.resync <= 0 {
		c.resync = time.Second
	}
	reg, err := cfg.Pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.forget,
	})
	if err != nil {
		return nil, fmt.Errorf("resize: pod handler: %w", err)
	}
	c.synced = reg.HasSynced
	return c, nil
}

// enqueue queues a pod that asks for a change and keeps the resync's set
// of them up to date.
func (c *Controller) enqueue(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key, err := cache.MetaNamespaceKeyFunc(pod)
	if err != nil {
		return
	}
	wants := wantsChange(pod)
	c.mu.Lock()
	if _, was := c.wanting[key]; was != wants {
		if wants {
			c.wanting[key] = struct{}{}
		} else {
			delete(c.wanting, key)
		}
	}
	c.mu.Unlock()
	if wants {
		c.queue.Add(key)
	}
}

func (c *Controller) forget(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		key, err := cache.MetaNamespaceKeyFunc(pod)
		c.mu.Lock()
		delete(c.reported, pod.UID)
		if err == nil {
			delete(c.wanting, key)
		}
		c.mu.Unlock()
	}
}

// Run works until ctx ends; the informer is started by its owner.
func (c *Controller) Run(ctx context.Context) error {
	log := klog.FromContext(ctx)
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return fmt.Errorf("resize: pod informer did not sync: %w", ctx.Err())
	}
	log.Info("resize controller ready", "annotation", api.AnnotationGPUs)
	go c.resyncLoop(ctx)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.next(ctx) {
	}
	return nil
}

func (c *Controller) resyncLoop(ctx context.Context) {
	t := time.NewTicker(c.resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.resyncOnce()
	}
}

// resyncOnce re-queues every pod that asks for a change.
func (c *Controller) resyncOnce() {
	c.mu.Lock()
	keys := make([]string, 0, len(c.wanting))
	for k := range c.wanting {
		keys = append(keys, k)
	}
	c.mu.Unlock()
	for _, k := range keys {
		c.queue.Add(k)
	}
}

func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		if errors.Is(err, ErrBooksBehind) {
			klog.FromContext(ctx).V(4).Info("books behind the pod, retrying", "pod", key)
		} else {
			klog.FromContext(ctx).Error(err, "resize", "pod", key)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	pod, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("get pod: %w", err)
	}
	raw, ok := pod.Annotations[api.AnnotationAssignment]
	if !ok || !wantsChange(pod) || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil || terminal(pod) {
		return nil
	}
	a, err := api.ParseAssignment(raw)
	if err != nil || a.Node != pod.Spec.NodeName {
		return nil // the scheduler reports bad assignments
	}
	if done, err := c.syncShares(ctx, pod, raw, a); done || err != nil {
		return err
	}
	wantRaw, wants := pod.Annotations[api.AnnotationGPUs]
	if !wants {
		return nil
	}
	want, err := ParseWant(wantRaw, a)
	if err != nil {
		c.report(pod, corev1.EventTypeWarning, api.ReasonGPUResizeInvalid, err.Error())
		return nil
	}
	var short []Shortfall
	out, err := c.books.BeginResize(string(pod.UID), raw, a, func(free []v1alpha2.GPU) *api.Assignment {
		out, s, changed := Plan(a, want, free)
		if short = s; !changed {
			return nil
		}
		return out
	})
	if err != nil {
		return fmt.Errorf("book resize: %w", err)
	}
	if out != nil {
		if done, err := c.write(ctx, pod, a, out, want); !done {
			return err
		}
	}
	if len(short) > 0 {
		msgs := make([]string, len(short))
		for i, s := range short {
			msgs[i] = s.String()
		}
		c.report(pod, corev1.EventTypeWarning, api.ReasonGPUResizePartial, fmt.Sprintf("node %s is short of free GPUs: %s", a.Node, strings.Join(msgs, "; ")))
	} else if out != nil {
		c.report(pod, corev1.EventTypeNormal, api.ReasonGPUResized, fmt.Sprintf("GPUs now %s", counts(out)))
	}
	return nil
}

// write stores the booked assignment out and settles the books: kept when
// written, rolled back otherwise. done is false when the pass must stop (a
// conflict waits for the pod's next update; other errors are retried).
func (c *Controller) write(ctx context.Context, pod *corev1.Pod, from, out *api.Assignment, want map[string]int) (done bool, err error) {
	uid := string(pod.UID)
	b, err := out.Marshal()
	if err != nil {
		c.books.EndResize(uid, "", false)
		return false, err
	}
	err = c.patch(ctx, pod, b)
	c.books.EndResize(uid, string(b), err == nil)
	if apierrors.IsConflict(err) {
		// The pod changed meanwhile; its update event queues it again
		// and the next pass plans from the new version.
		klog.FromContext(ctx).V(2).Info("pod changed while resizing, retrying", "pod", klog.KObj(pod))
		return false, nil
	}
	if err != nil {
		return false, err
	}
	klog.FromContext(ctx).Info("resized", "pod", klog.KObj(pod), "node", from.Node, "want", want, "from", counts(from), "to", counts(out))
	return true, nil
}

func counts(a *api.Assignment) string {
	parts := make([]string, len(a.Containers))
	for i, c := range a.Containers {
		parts[i] = fmt.Sprintf("%s=%d", c.Name, len(c.GPUs))
	}
	return strings.Join(parts, ",")
}

// patch writes the new assignment, failing on a concurrent change of the pod.
func (c *Controller) patch(ctx context.Context, pod *corev1.Pod, b []byte) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": pod.ResourceVersion,
		"annotations":     map[string]string{api.AnnotationAssignment: string(b)},
	}})
	if err != nil {
		return fmt.Errorf("patch: %w", err)
	}
	_, err = c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("write assignment of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// report emits an Event unless the same message was the last one for pod.
func (c *Controller) report(pod *corev1.Pod, kind, reason, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reported[pod.UID] == reason+msg {
		return
	}
	c.reported[pod.UID] = reason + msg
	if c.events != nil {
		c.events.Eventf(pod, nil, kind, reason, "Resize", "%s", msg)
	}
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
