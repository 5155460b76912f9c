package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// claimTimeline records, as seen by the bench's claim informer, when each
// victim's claim (f-) lost its allocation (gpuslice-scheduler deallocates
// it once the victim is gone: no resource claim controller runs) and when
// each preemptor's claim (p-) got its allocation (the binding cycle's
// PreBind). With the pods' timeline it splits a DRA preemptor's time from
// creation to binding into its steps (split).
type claimTimeline struct {
	mu sync.Mutex
	// released: victim claim name -> first seen deallocated; releasedOn:
	// per node (the allocation's pool), those times in order.
	released   map[string]time.Time
	releasedOn map[string][]time.Time
	// allocated: preemptor index -> first seen allocated.
	allocated map[int]time.Time
	// pool: the node each victim claim was allocated on (its pool).
	pool map[string]string
}

// watchClaims starts a claim informer on ns feeding a claimTimeline.
func watchClaims(ctx context.Context, cp *harness.ControlPlane, ns string) (*claimTimeline, error) {
	t := &claimTimeline{released: map[string]time.Time{}, releasedOn: map[string][]time.Time{},
		allocated: map[int]time.Time{}, pool: map[string]string{}}
	f := informers.NewSharedInformerFactoryWithOptions(cp.Client, 0, informers.WithNamespace(ns))
	inf := f.Resource().V1().ResourceClaims().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.see,
		UpdateFunc: func(_, obj any) { t.see(obj) },
	}); err != nil {
		return nil, fmt.Errorf("claim informer: %w", err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("claim informer did not sync")
	}
	return t, nil
}

func (t *claimTimeline) see(obj any) {
	c, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if strings.HasPrefix(c.Name, "f-") {
		if a := c.Status.Allocation; a != nil && len(a.Devices.Results) > 0 {
			t.pool[c.Name] = a.Devices.Results[0].Pool
			return
		}
		if _, ok := t.released[c.Name]; !ok && t.pool[c.Name] != "" {
			t.released[c.Name] = now
			t.releasedOn[t.pool[c.Name]] = append(t.releasedOn[t.pool[c.Name]], now)
		}
		return
	}
	var i int
	if _, err := fmt.Sscanf(c.Name, "p-%d", &i); err != nil || c.Status.Allocation == nil {
		return
	}
	if _, ok := t.allocated[i]; !ok {
		t.allocated[i] = now
	}
}

// split prints a DRA preemption run's steps, p50/p99 over the preemptors
// (or victims) each applies to, beside the pods' steps (timeline.split):
//   - victim gone -> its claim deallocated (gpuslice-scheduler's release);
//   - the last claim deallocated on the preemptor's node before its
//     claim's allocation -> that allocation (the activation, the queue, the
//     scheduling cycle, PreBind's claim status write);
//   - the preemptor's claim allocated -> the pod bound (the rest of the
//     binding cycle: the Binding call).
func (t *claimTimeline) split(pods *timeline, bound map[int]time.Time) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	pods.mu.Lock()
	defer pods.mu.Unlock()
	var release, retry, bind []time.Duration
	for name, r := range t.released {
		if g, ok := pods.gone[name]; ok && !r.Before(g) {
			release = append(release, r.Sub(g))
		}
	}
	for i, a := range t.allocated {
		if b, ok := bound[i]; ok {
			bind = append(bind, b.Sub(a))
		}
		var last time.Time
		for _, r := range t.releasedOn[pods.node[i]] {
			if !r.After(a) {
				last = r
			}
		}
		if !last.IsZero() {
			retry = append(retry, a.Sub(last))
		}
	}
	return fmt.Sprintf("dra preemption claim steps (p50/p99 ms): victim gone->claim deallocated %s (%d); "+
		"last claim deallocated on the node->preemptor's claim allocated %s (%d); claim allocated->bound %s (%d)",
		pct(release), len(release), pct(retry), len(retry), pct(bind), len(bind))
}
