package gpunoderow

import (
	"context"
	"fmt"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// leaseSeconds is how long a renewal holds: LeaseDuration, else 4 periods,
// at least a second.
func (p *Publisher) leaseSeconds() int32 {
	d := p.LeaseDuration
	if d <= 0 {
		d = 4 * p.Period
	}
	return int32(max(d/time.Second, 1))
}

// renewLease writes the node's Lease with renewTime now: an update of the
// Lease last written (conditioned on its resourceVersion), else of the one
// read, else a create. A failed write drops the cached Lease, so the next
// renewal reads it again.
func (p *Publisher) renewLease(ctx context.Context) error {
	if p.Leases == nil {
		return nil
	}
	c := p.Leases.Leases(api.LeaseNamespace)
	name := api.LeaseName(p.Node)
	now := metav1.NewMicroTime(p.Clock.Now())
	le, exists := p.lease, true
	if le == nil {
		cur, err := c.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			cur, exists = &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: api.LeaseNamespace, Name: name}}, false
			cur.Spec.AcquireTime = &now
		case err != nil:
			return fmt.Errorf("read Lease %s/%s: %w", api.LeaseNamespace, name, err)
		}
		le = cur
	}
	le = le.DeepCopy()
	if le.Labels == nil {
		le.Labels = map[string]string{}
	}
	le.Labels[api.LabelLeaseNode] = p.Node
	holder, secs := p.Node, p.leaseSeconds()
	le.Spec.HolderIdentity, le.Spec.LeaseDurationSeconds, le.Spec.RenewTime = &holder, &secs, &now
	var out *coordv1.Lease
	var err error
	if !exists {
		out, err = c.Create(ctx, le, metav1.CreateOptions{})
	} else {
		out, err = c.Update(ctx, le, metav1.UpdateOptions{})
	}
	if err != nil {
		p.lease = nil
		return fmt.Errorf("renew Lease %s/%s: %w", api.LeaseNamespace, name, err)
	}
	p.lease = out
	return nil
}
