package gpunoderow

import (
	"context"
	"fmt"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/pkg/generated/clientset/versioned"
)

// conflictBackoff spreads retries of concurrent writers of one object.
func conflictBackoff() wait.Backoff {
	return wait.Backoff{Steps: 30, Duration: 5 * time.Millisecond, Factor: 1.3, Jitter: 1, Cap: time.Second}
}

// StateFunc tells the node's working state and an optional message.
type StateFunc func() (v1alpha2.NodeState, string)

// ObserveFunc receives each published state and the GPUs measured (none
// when reading them failed).
type ObserveFunc func(state v1alpha2.NodeState, devs []Device)

// Publisher writes one node's GPUNode row.
type Publisher struct {
	Client versioned.Interface
	Node   string
	GPUs   GPUReader
	Held   AllocationReader
	State  StateFunc // nil: always Working
	// Observe, if set, sees every state written (the node agent marks
	// its device plugins' GPUs unhealthy unless Working).
	Observe ObserveFunc
	Clock   clock.PassiveClock
	Period  time.Duration
	// Kick, if set, publishes at once (a GPU's health changed) instead of
	// at the next period.
	Kick <-chan struct{}
	// Leases, if set, renews the node's Lease (its liveness, see
	// api.LeaseName) after each publication: the status itself is
	// written only when it changes.
	Leases coordinationv1client.LeasesGetter
	// LeaseDuration is how long a renewal holds (0: 4 periods).
	LeaseDuration time.Duration

	lease *coordv1.Lease // the Lease as last written; nil: read it first
}

// PublishOnce measures and writes the row when its status changed: create if
// absent, else an update conditioned on the resourceVersion just read,
// retried on conflict; a status equal to the one stored (but for updateTime)
// is not written. Fields it does not own (labels, annotations, ...) are kept.
// Then it renews the node's Lease.
func (p *Publisher) PublishOnce(ctx context.Context) error {
	held, err := p.Held.Held(ctx)
	if err != nil {
		return fmt.Errorf("read holdings: %w", err)
	}
	state, msg := v1alpha2.NodeWorking, ""
	if p.State != nil {
		state, msg = p.State()
	}
	// A driver that fails (NVML error, GPUs gone) is published as
	// NotReady, so the scheduler stops placing pods at once instead of
	// waiting for the heartbeat to go stale.
	devs, derr := p.GPUs.Devices(ctx)
	if derr != nil {
		devs, state, msg = nil, v1alpha2.NodeNotReady, clipMessage("reading the GPUs failed: "+derr.Error())
	}
	st, err := Status(devs, held, state, msg)
	if err != nil {
		return err
	}
	st.UpdateTime = metav1.NewTime(p.Clock.Now())
	st.PeriodSeconds = int32(p.Period / time.Second)
	if p.Observe != nil {
		p.Observe(state, devs)
	}
	if err := p.write(ctx, st); err != nil {
		return err
	}
	if err := p.renewLease(ctx); err != nil || derr == nil {
		return err
	}
	return fmt.Errorf("read GPUs: %w", derr)
}

func (p *Publisher) write(ctx context.Context, st v1alpha2.GPUNodeStatus) error {
	// The row's status is written through the status subresource: the
	// API server ignores status on create and on a plain update.
	c := p.Client.GpusliceV1alpha2().GPUNodes()
	err := retry.RetryOnConflict(conflictBackoff(), func() error {
		cur, err := c.Get(ctx, p.Node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cur, err = c.Create(ctx, &v1alpha2.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: p.Node}}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(v1alpha2.Resource(v1alpha2.GPUNodeResource), p.Node, err)
			}
		}
		if err != nil {
			return err
		}
		if SameStatus(cur.Status, st) {
			return nil // nothing changed: no write
		}
		cur.Status = st // cur carries the resourceVersion read
		_, err = c.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("write GPUNode %s: %w", p.Node, err)
	}
	return nil
}

// Run publishes every Period until ctx ends; failures are logged and retried
// at the next period.
func (p *Publisher) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", p.Node)
	t := time.NewTicker(p.Period)
	defer t.Stop()
	for {
		if err := p.PublishOnce(ctx); err != nil {
			logger.Error(err, "publishing GPUNode")
		} else {
			logger.V(4).Info("published GPUNode")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-p.Kick:
		}
	}
}

// clipMessage bounds a state message taken from an error.
func clipMessage(s string) string { return clipTo(s, 256) }

// clipTo bounds s to limit bytes (and an ellipsis).
func clipTo(s string, limit int) string {
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}

// SameStatus reports whether two statuses say the same but for updateTime.
func SameStatus(a, b v1alpha2.GPUNodeStatus) bool {
	a.UpdateTime = b.UpdateTime
	return apiequality.Semantic.DeepEqual(a, b)
}
