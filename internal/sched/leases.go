package sched

import (
	"context"
	"fmt"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// leaseOf reads a node agent's Lease: the node it names (api.LabelLeaseNode,
// which must match the holder and the Lease's name), its last renewal and
// its duration. A Lease never renewed counts as renewed at the zero time
// (expired).
func leaseOf(le *coordv1.Lease) (string, alloc.Lease, error) {
	node := le.Labels[api.LabelLeaseNode]
	switch {
	case node == "":
		return "", alloc.Lease{}, fmt.Errorf("lease %s/%s: no %s label", le.Namespace, le.Name, api.LabelLeaseNode)
	case le.Name != api.LeaseName(node) || le.Spec.HolderIdentity == nil || *le.Spec.HolderIdentity != node:
		return "", alloc.Lease{}, fmt.Errorf("lease %s/%s: name or holder does not match node %q", le.Namespace, le.Name, node)
	}
	var out alloc.Lease
	if le.Spec.RenewTime != nil {
		out.Renewed = le.Spec.RenewTime.Time
	}
	if d := le.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		out.Duration = time.Duration(*d) * time.Second
	}
	return node, out, nil
}

// watchLeases feeds the node agents' Leases (liveness) into the books, wakes
// parked pods when one revives a node, and waits for the first list.
func watchLeases(ctx context.Context, cs kubernetes.Interface, l *Books, w *waiters) error {
	logger := klog.FromContext(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(api.LeaseNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = api.LabelLeaseNode }))
	inf := f.Coordination().V1().Leases().Informer()
	set := func(obj any) {
		le, ok := obj.(*coordv1.Lease)
		if !ok {
			return
		}
		node, lease, err := leaseOf(le)
		if err != nil {
			logger.Error(err, "ignoring Lease")
			return
		}
		if l.SetLease(node, lease) {
			logger.V(4).Info("node agent alive again", "node", node)
			w.wake(ctx)
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if le, ok := obj.(*coordv1.Lease); ok {
				if node, _, err := leaseOf(le); err == nil {
					l.RemoveLease(node)
				}
			}
		},
	})
	if err != nil {
		return fmt.Errorf("%s: Lease handler: %w", Name, err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return fmt.Errorf("%s: Lease informer did not sync: %w", Name, ctx.Err())
	}
	return nil
}
