package queuecheck

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/pkg/generated/clientset/versioned"
	"github.com/gpuslice/gpuslice/pkg/generated/informers/externalversions"
)

// ControllerName is the AdmissionCheck spec.controllerName this check serves.
const ControllerName = "gpuslice.io/fits"

// FieldManager owns the check's state in Workloads and the Active condition
// of its AdmissionChecks (server-side apply).
const FieldManager = "gpuslice-queuecheck"

// ReasonQuota is the reason of the Warning event on a ClusterQueue.
const ReasonQuota = "GPUSliceQuota"

const kueueGroup = "kueue.x-k8s.io"

// The Kueue resources the check reads and writes (v1beta2, Kueue v0.15 on).
var (
	WorkloadsGVR       = schema.GroupVersionResource{Group: kueueGroup, Version: "v1beta2", Resource: "workloads"}
	AdmissionChecksGVR = schema.GroupVersionResource{Group: kueueGroup, Version: "v1beta2", Resource: "admissionchecks"}
	ClusterQueuesGVR   = schema.GroupVersionResource{Group: kueueGroup, Version: "v1beta2", Resource: "clusterqueues"}
)

// Config is what the controller needs.
type Config struct {
	Dynamic  dynamic.Interface
	GPUNodes versioned.Interface
	Events   events.EventRecorder
}

// Controller runs the check (Run).
type Controller struct {
	cfg    Config
	queue  workqueue.TypedRateLimitingInterface[string]
	wls    cache.GenericLister
	acs    cache.GenericLister
	cqs    cache.GenericLister
	nodes  func() ([]*v1alpha2.GPUNode, error)
	mu     sync.Mutex
	warned map[string]string // ClusterQueue -> problems last reported
}

// New returns the controller; Run starts it.
func New(cfg Config) *Controller {
	return &Controller{cfg: cfg, warned: map[string]string{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
}

// Run watches Workloads, AdmissionChecks, ClusterQueues and GPUNode rows
// and decides until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	df := dynamicinformer.NewDynamicSharedInformerFactory(c.cfg.Dynamic, 10*time.Minute)
	gf := externalversions.NewSharedInformerFactory(c.cfg.GPUNodes, 10*time.Minute)
	kinds := map[string]schema.GroupVersionResource{"wl": WorkloadsGVR, "ac": AdmissionChecksGVR, "cq": ClusterQueuesGVR}
	listers := map[string]*cache.GenericLister{"wl": &c.wls, "ac": &c.acs, "cq": &c.cqs}
	var synced []cache.InformerSynced
	for kind, gvr := range kinds {
		inf := df.ForResource(gvr)
		*listers[kind] = inf.Lister()
		if _, err := inf.Informer().AddEventHandler(c.enqueuer(kind)); err != nil {
			return fmt.Errorf("queuecheck: %s handler: %w", gvr.Resource, err)
		}
		synced = append(synced, inf.Informer().HasSynced)
	}
	rows := gf.Gpuslice().V1alpha2().GPUNodes()
	if _, err := rows.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.enqueueAll("wl", c.wls) }, UpdateFunc: func(_, _ any) { c.enqueueAll("wl", c.wls) },
	}); err != nil {
		return fmt.Errorf("queuecheck: GPUNode handler: %w", err)
	}
	c.nodes = func() ([]*v1alpha2.GPUNode, error) { return rows.Lister().List(labels.Everything()) }
	synced = append(synced, rows.Informer().HasSynced)
	df.Start(ctx.Done())
	gf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("queuecheck: caches never synced (are Kueue's v1beta2 CRDs installed?)")
	}
	klog.FromContext(ctx).Info("kueue admission check running", "controllerName", ControllerName)
	go func() { <-ctx.Done(); c.queue.ShutDown() }()
	for c.next(ctx) {
	}
	return nil
}

func (c *Controller) enqueuer(kind string) cache.ResourceEventHandler {
	add := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(kind + "|" + key)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) }}
}

func (c *Controller) enqueueAll(kind string, l cache.GenericLister) {
	if l == nil {
		return
	}
	objs, err := l.List(labels.Everything())
	if err != nil {
		return
	}
	for _, o := range objs {
		if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
			c.queue.Add(kind + "|" + key)
		}
	}
}

func (c *Controller) next(ctx context.Context) bool {
	item, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(item)
	kind, key, _ := strings.Cut(item, "|")
	var err error
	switch kind {
	case "wl":
		err = c.workload(ctx, key)
	case "ac":
		err = c.admissionCheck(ctx, key)
	case "cq":
		c.clusterQueue(key)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "queuecheck", "object", item)
		c.queue.AddRateLimited(item)
		return true
	}
	c.queue.Forget(item)
	return true
}

// ours returns the names of the AdmissionChecks this controller serves.
func (c *Controller) ours() map[string]bool {
	out := map[string]bool{}
	objs, err := c.acs.List(labels.Everything())
	if err != nil {
		return out
	}
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if name, _, _ := unstructured.NestedString(u.Object, "spec", "controllerName"); name == ControllerName {
			out[u.GetName()] = true
		}
	}
	return out
}

// admissionCheck marks an AdmissionCheck of this controller Active.
func (c *Controller) admissionCheck(ctx context.Context, key string) error {
	if !c.ours()[key] {
		return nil
	}
	cond := map[string]any{"type": "Active", "status": "True", "reason": "Active",
		"message":            "gpuslice-scheduler rejects Workloads whose containers no GPU in the cluster can hold",
		"lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kueueGroup + "/v1beta2", "kind": "AdmissionCheck", "metadata": map[string]any{"name": key},
		"status": map[string]any{"conditions": []any{cond}}}}
	_, err := c.cfg.Dynamic.Resource(AdmissionChecksGVR).Apply(ctx, key, obj,
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true}, "status")
	if err != nil {
		return fmt.Errorf("admission check %s: %w", key, err)
	}
	return nil
}

// workload decides this controller's pending checks of a Workload that has
// quota reserved.
func (c *Controller) workload(ctx context.Context, key string) error {
	obj, err := c.wls.Get(key)
	if err != nil {
		return nil // gone
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	pending := pendingChecks(u, c.ours())
	// Decided once Kueue reserved quota (the ClusterQueue is known then;
	// the check's state matters to Kueue from then on).
	cq, _, _ := unstructured.NestedString(u.Object, "status", "admission", "clusterQueue")
	if len(pending) == 0 || cq == "" {
		return nil
	}
	nodes, err := c.clusterNodes()
	if err != nil || len(nodes) == 0 {
		return err // no GPUNode row yet: decided when one comes
	}
	sets, err := podSets(u)
	if err != nil {
		return c.setState(ctx, u, pending, "Rejected", err.Error())
	}
	if why := Verdict(sets, nodes); why != "" {
		return c.setState(ctx, u, pending, "Rejected", why)
	}
	why, err := c.draMemory(ctx, u, sets, nodes)
	if err != nil {
		return err
	}
	if why != "" {
		return c.setState(ctx, u, pending, "Rejected", why)
	}
	return c.setState(ctx, u, pending, "Ready", "a GPU in the cluster can hold every container's request")
}

func pendingChecks(u *unstructured.Unstructured, ours map[string]bool) []string {
	checks, _, _ := unstructured.NestedSlice(u.Object, "status", "admissionChecks")
	var out []string
	for _, ch := range checks {
		m, ok := ch.(map[string]any)
		if !ok {
			continue
		}
		if name, _ := m["name"].(string); ours[name] && m["state"] == "Pending" {
			out = append(out, name)
		}
	}
	return out
}

func podSets(u *unstructured.Unstructured) ([]PodSet, error) {
	raw, _, _ := unstructured.NestedSlice(u.Object, "spec", "podSets")
	out := make([]PodSet, 0, len(raw))
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("workload %s: a pod set is not an object", u.GetName())
		}
		var ps PodSet
		ps.Name, _ = m["name"].(string)
		tmpl, _ := m["template"].(map[string]any)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &ps.Template); err != nil {
			return nil, fmt.Errorf("workload %s: pod set %q: %w", u.GetName(), ps.Name, err)
		}
		out = append(out, ps)
	}
	return out, nil
}

func (c *Controller) setState(ctx context.Context, u *unstructured.Unstructured, checks []string, state, msg string) error {
	now := metav1.Now().UTC().Format(time.RFC3339)
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	var entries []any
	for _, name := range checks {
		entries = append(entries, map[string]any{"name": name, "state": state, "message": msg, "lastTransitionTime": now})
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kueueGroup + "/v1beta2", "kind": "Workload",
		"metadata": map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()},
		"status":   map[string]any{"admissionChecks": entries}}}
	_, err := c.cfg.Dynamic.Resource(WorkloadsGVR).Namespace(u.GetNamespace()).Apply(ctx, u.GetName(), obj,
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true}, "status")
	if err != nil {
		return fmt.Errorf("workload %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	klog.FromContext(ctx).V(2).Info("admission check decided", "workload", klog.KObj(u), "state", state, "message", msg)
	return nil
}

// clusterNodes are the GPUNode rows as Nodes.
func (c *Controller) clusterNodes() ([]Node, error) {
	rows, err := c.nodes()
	if err != nil {
		return nil, err
	}
	out := make([]Node, 0, len(rows))
	for _, r := range rows {
		n := Node{Name: r.Name}
		for _, g := range r.Status.GPUs {
			n.GPUs = append(n.GPUs, GPU{Units: g.UnitsTotal, Memory: g.Memory.Value(), Sharing: g.SharingMode})
		}
		out = append(out, n)
	}
	return out, nil
}

// clusterQueue warns once per change about a ClusterQueue's gpuslice quota.
func (c *Controller) clusterQueue(key string) {
	obj, err := c.cqs.Get(key)
	if err != nil {
		return
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	problems := strings.Join(QueueProblems(quotasOf(u)), "; ")
	c.mu.Lock()
	changed := c.warned[key] != problems
	c.warned[key] = problems
	c.mu.Unlock()
	if changed && problems != "" {
		c.cfg.Events.Eventf(u, nil, corev1.EventTypeWarning, ReasonQuota, "Check", "%s", problems)
	}
}

// quotasOf reads a ClusterQueue's quotas.
func quotasOf(u *unstructured.Unstructured) []Quota {
	cohort, _, _ := unstructured.NestedString(u.Object, "spec", "cohortName")
	groups, _, _ := unstructured.NestedSlice(u.Object, "spec", "resourceGroups")
	var out []Quota
	for _, g := range groups {
		flavors, _, _ := unstructured.NestedSlice(asMap(g), "flavors")
		for _, f := range flavors {
			fname, _, _ := unstructured.NestedString(asMap(f), "name")
			res, _, _ := unstructured.NestedSlice(asMap(f), "resources")
			for _, r := range res {
				m := asMap(r)
				q := Quota{Flavor: fname, InCohort: cohort != ""}
				name, _ := m["name"].(string)
				q.Name = corev1.ResourceName(name)
				q.Nominal = quantity(m["nominalQuota"])
				if b, ok := m["borrowingLimit"]; ok {
					v := quantity(b)
					q.Borrowing = &v
				}
				out = append(out, q)
			}
		}
	}
	return out
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func quantity(v any) resource.Quantity {
	q, err := resource.ParseQuantity(fmt.Sprint(v))
	if err != nil {
		return resource.Quantity{}
	}
	return q
}
