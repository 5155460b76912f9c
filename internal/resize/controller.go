package resize

import (
	"context"
	"encoding/json"

	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// Event reasons.
const (
	ReasonResized      = "GPUResized"
	ReasonPartialGrant = "GPUResizePartial"
	ReasonInvalid      = "GPUResizeInvalid"
)

// Controller grants and releases whole GPUs of running pods.
type Controller struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	Events  events.EventRecorder
	// Resync re-examines every resizable pod this often (GPUs freed by
	// other pods reach short pods this way too).
	Resync time.Duration

	pods     listersv1.PodLister
	queue    workqueue.TypedRateLimitingInterface[string]
	mu       sync.Mutex
	reported map[types.UID]string // last Event message per pod
}

// Run watches pods until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	log := klog.FromContext(ctx)
	if c.Resync <= 0 {
		c.Resync = time.Second
	}
	c.reported = map[types.UID]string{}
	c.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer c.queue.ShutDown()
	f := informers.NewSharedInformerFactory(c.Client, 0)
	inf := f.Core().V1().Pods()
	c.pods = inf.Lister()
	enqueue := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Annotations[AnnotationWantGPUs] != "" {
			if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
				c.queue.Add(key)
			}
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return fmt.Errorf("resize: pod handler: %w", err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return fmt.Errorf("resize: pod informer did not sync: %w", ctx.Err())
	}
	log.Info("resize controller ready", "annotation", AnnotationWantGPUs)
	go c.resync(ctx, enqueue)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.next(ctx) {
	}
	return nil
}

func (c *Controller) resync(ctx context.Context, enqueue func(any)) {
	t := time.NewTicker(c.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pods, err := c.pods.List(labels.Everything())
		if err != nil {
			continue
		}
		for _, p := range pods {
			enqueue(p)
		}
	}
}

func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "resize", "pod", key)
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
	if !ok || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil || terminal(pod) {
		return nil
	}
	a, err := api.ParseAssignment(raw)
	if err != nil {
		return nil // the scheduler reports bad assignments
	}
	want, err := ParseWant(pod.Annotations[AnnotationWantGPUs], a)
	if err != nil {
		c.report(pod, corev1.EventTypeWarning, ReasonInvalid, err.Error())
		return nil
	}
	free, err := c.free(ctx, pod, a.Node)
	if err != nil {
		return err
	}
	out, short, changed := Plan(a, want, free)
	if changed {
		err := c.patch(ctx, pod, out)
		if apierrors.IsConflict(err) {
			// The pod changed meanwhile; its update event queues it again
			// and the next pass plans from the new version.
			klog.FromContext(ctx).V(2).Info("pod changed while resizing, retrying", "pod", klog.KObj(pod))
			return nil
		}
		if err != nil {
			return err
		}
		klog.FromContext(ctx).Info("resized", "pod", klog.KObj(pod), "node", a.Node, "want", want, "from", counts(a), "to", counts(out))
	}
	if len(short) > 0 {
		msgs := make([]string, len(short))
		for i, s := range short {
			msgs[i] = s.String()
		}
		c.report(pod, corev1.EventTypeWarning, ReasonPartialGrant, fmt.Sprintf("node %s is short of free GPUs: %s", a.Node, strings.Join(msgs, "; ")))
	} else if changed {
		c.report(pod, corev1.EventTypeNormal, ReasonResized, fmt.Sprintf("GPUs now %s", counts(out)))
	}
	return nil
}

func counts(a *api.Assignment) string {
	parts := make([]string, len(a.Containers))
	for i, c := range a.Containers {
		parts[i] = fmt.Sprintf("%s=%d", c.Name, len(c.GPUs))
	}
	return strings.Join(parts, ",")
}

// free returns the node's GPUs no other live pod holds.
func (c *Controller) free(ctx context.Context, pod *corev1.Pod, node string) ([]api.GPU, error) {
	u, err := c.Dynamic.Resource(api.GPUNodeGVR).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("GPUNode %s: %w", node, err)
	}
	var row api.GPUNode
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &row); err != nil {
		return nil, fmt.Errorf("%w %s: %w", api.ErrInvalidGPUNode, node, err)
	}
	if err := row.Validate(); err != nil {
		return nil, err
	}
	all, err := c.pods.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var others []*api.Assignment
	for _, p := range all {
		if p.UID == pod.UID || p.Spec.NodeName != node || terminal(p) {
			continue
		}
		if a, err := api.ParseAssignment(p.Annotations[api.AnnotationAssignment]); err == nil {
			others = append(others, a)
		}
	}
	return FreeGPUs(&row, others), nil
}

// patch writes the new assignment, failing on a concurrent change of the pod.
func (c *Controller) patch(ctx context.Context, pod *corev1.Pod, a *api.Assignment) error {
	b, err := a.Marshal()
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": pod.ResourceVersion,
		"annotations":     map[string]string{api.AnnotationAssignment: string(b)},
	}})
	if err != nil {
		return fmt.Errorf("patch: %w", err)
	}
	_, err = c.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
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
	if c.Events != nil {
		c.Events.Eventf(pod, nil, kind, reason, "Resize", "%s", msg)
	}
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
