package sched

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
)

// Leader says when this scheduler replica leads. The plugin is built before
// leader election runs, so work that must happen in one replica only (the
// resize controller) waits for Leading. A replica that loses the lease
// exits (kube-scheduler's OnStoppedLeading), so leading never ends early.
type Leader struct {
	once sync.Once
	ch   chan struct{}
}

// NewLeader returns a Leader that does not lead yet.
func NewLeader() *Leader { return &Leader{ch: make(chan struct{})} }

// Lead marks this replica as the leader (idempotent).
func (l *Leader) Lead() { l.once.Do(func() { close(l.ch) }) }

// Leading is closed once this replica leads.
func (l *Leader) Leading() <-chan struct{} { return l.ch }

// Factory is the plugin factory for app.WithPlugin with the resize
// controller gated on l; with s, its books steer the devices DRAFactory(s)'s
// plugin offers the allocator in the same profile (drasteer.go).
func Factory(l *Leader, s *Steering) func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		return newPlugin(ctx, obj, h, l.Leading(), s)
	}
}

// waitLeading blocks until leading is closed (true) or ctx ends (false).
func waitLeading(ctx context.Context, leading <-chan struct{}) bool {
	select {
	case <-leading:
		return true
	case <-ctx.Done():
		return false
	}
}
