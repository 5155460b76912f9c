package agent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/dra"
	drav1 "github.com/gpuslice/gpuslice/pkg/apis/dra/v1alpha1"
)

// claimWatcher applies live changes of the configuration of claims prepared
// on this node: the annotation gpuslice.io/share-config on a ResourceClaim
// (internal/dra Reconfigure). One worker; a refused change is a Warning
// event on the claim naming the field.
type claimWatcher struct {
	d      *dra.Driver
	claims resourcelisters.ResourceClaimLister
	queue  workqueue.TypedInterface[cache.ObjectName]
	rec    record.EventRecorder
	// applied is each claim's annotation last applied or refused (absent:
	// not annotated since this agent started, or the annotation removed).
	applied map[types.UID]string
}

// watchClaims runs the watcher until ctx ends.
func (p *parts) watchClaims(ctx context.Context, d *dra.Driver) {
	f := informers.NewSharedInformerFactoryWithOptions(p.cs, 0, informers.WithTransform(claimsOfPool(p.cfg.NodeName)))
	inf := f.Resource().V1().ResourceClaims()
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: p.cs.CoreV1().Events("")})
	defer b.Shutdown()
	w := &claimWatcher{d: d, claims: inf.Lister(), queue: workqueue.NewTyped[cache.ObjectName](),
		rec:     b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "gpuslice-node", Host: p.cfg.NodeName}),
		applied: map[types.UID]string{}}
	enqueue := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if c, ok := obj.(*resourceapi.ResourceClaim); ok {
			w.queue.Add(cache.MetaObjectToName(c))
		}
	}
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue})
	if err != nil {
		klog.FromContext(ctx).Error(err, "DRA claim watcher not started: live changes of claims are off")
		return
	}
	go func() { <-ctx.Done(); w.queue.ShutDown() }()
	f.Start(ctx.Done())
	defer f.Shutdown()
	for w.next(ctx) {
	}
}

// next handles one queued claim; false once the queue is shut down.
func (w *claimWatcher) next(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	c, err := w.claims.ResourceClaims(key.Namespace).Get(key.Name)
	if err != nil { // deleted: forget the claims no longer prepared here
		prepared := w.d.Prepared()
		for uid := range w.applied {
			if _, ok := prepared[string(uid)]; !ok {
				delete(w.applied, uid)
			}
		}
		return true
	}
	w.handle(ctx, c)
	return true
}

// handle applies a claim's annotation if it changed since last seen.
func (w *claimWatcher) handle(ctx context.Context, c *resourceapi.ResourceClaim) {
	raw, has := c.Annotations[drav1.ShareConfigAnnotation]
	last, seen := w.applied[c.UID]
	if !has && !seen || has && seen && raw == last {
		return // never annotated (Prepare applied its configuration), or unchanged
	}
	start := time.Now()
	ours, err := w.d.Reconfigure(ctx, c)
	if !ours {
		return // not prepared here (yet: Prepare reads the annotation then)
	}
	if has {
		w.applied[c.UID] = raw
	} else {
		delete(w.applied, c.UID) // removed: back to the allocation's configuration
	}
	log := klog.FromContext(ctx).WithValues("claim", c.Namespace+"/"+c.Name, "uid", c.UID)
	if err != nil {
		log.Error(err, "DRA claim configuration refused; nothing changed")
		w.rec.Eventf(c, corev1.EventTypeWarning, "InvalidShareConfig", "%v; nothing changed", err)
		return
	}
	log.Info("DRA claim reconfigured", "duration", time.Since(start).String())
	w.rec.Eventf(c, corev1.EventTypeNormal, "ShareConfigApplied", "%s applied to the claim's group", drav1.ShareConfigAnnotation)
}

// claimsOfPool is the claim informer's transform: the watch sees every
// ResourceClaim of the cluster, but only those allocated a device of this
// node's pool are kept whole; the others are cached as their name, UID and
// resource version alone (no spec, status, annotations or managed fields), so
// what a node holds does not grow with the cluster's claims.
func claimsOfPool(pool string) cache.TransformFunc {
	return func(obj any) (any, error) {
		c, ok := obj.(*resourceapi.ResourceClaim)
		if !ok || allocatedIn(c, pool) {
			return obj, nil
		}
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name,
			UID: c.UID, ResourceVersion: c.ResourceVersion}}, nil
	}
}

// allocatedIn reports whether c is allocated a gpuslice.io device of pool.
func allocatedIn(c *resourceapi.ResourceClaim, pool string) bool {
	if c.Status.Allocation == nil {
		return false
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == dra.DriverName && r.Pool == pool {
			return true
		}
	}
	return false
}
