package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// timeline records, as seen by the bench's pod informer, when each
// preemptor was first nominated and where, and when each priority-0 pod
// was marked for eviction (DisruptionTarget), got its deletion timestamp
// and was gone. From them the preemption phase's wall time is split into
// its steps (see split).
type timeline struct {
	mu sync.Mutex
	// nominated: preemptor index -> first time seen nominated.
	nominated map[int]time.Time
	// node: preemptor index -> the node it was bound to.
	node map[int]string
	// Victims by name: first DisruptionTarget, first deletion timestamp, gone.
	marked, deleting, gone map[string]time.Time
	// goneOn: per node, the times its priority-0 pods went, in order.
	goneOn map[string][]time.Time
}

func newTimeline() *timeline {
	return &timeline{nominated: map[int]time.Time{}, node: map[int]string{}, marked: map[string]time.Time{},
		deleting: map[string]time.Time{}, gone: map[string]time.Time{}, goneOn: map[string][]time.Time{}}
}

// handler feeds the timeline from a pod informer.
func (t *timeline) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.see(obj, false) },
		UpdateFunc: func(_, obj any) { t.see(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			t.see(obj, true)
		},
	}
}

func (t *timeline) see(obj any, deleted bool) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	first := func(m map[string]time.Time, k string) {
		if _, ok := m[k]; !ok {
			m[k] = now
		}
	}
	if strings.HasPrefix(p.Name, "f-") {
		if deleted {
			if _, ok := t.gone[p.Name]; !ok {
				t.gone[p.Name] = now
				t.goneOn[p.Spec.NodeName] = append(t.goneOn[p.Spec.NodeName], now)
			}
			return
		}
		if p.DeletionTimestamp != nil {
			first(t.deleting, p.Name)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
				first(t.marked, p.Name)
			}
		}
		return
	}
	var i int
	if _, err := fmt.Sscanf(p.Name, "p-%d", &i); err != nil {
		return
	}
	if _, ok := t.nominated[i]; !ok && p.Status.NominatedNodeName != "" {
		t.nominated[i] = now
	}
	if p.Spec.NodeName != "" {
		t.node[i] = p.Spec.NodeName
	}
}

// split prints the phase's steps, p50 / p99 over the preemptors (or
// victims) each applies to:
//   - wait + preempt: creation -> first seen nominated (queue wait for the
//     first attempt, the attempt, the nomination's status patch);
//   - evict: a victim's DisruptionTarget -> its deletion timestamp -> gone
//     (the executor's API calls, then KWOK removing the pod);
//   - retry: the last priority-0 pod gone from its node before the
//     preemptor's binding -> binding seen (queue wait, backoff, the attempt
//     that binds, the Binding call);
//   - bound without a victim: preemptors that took room freed for others.
func (t *timeline) split(created []time.Time, bound map[int]time.Time) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var wait, retry, mark, del []time.Duration
	direct := 0
	for i, c := range created {
		if n, ok := t.nominated[i]; ok {
			wait = append(wait, n.Sub(c))
		} else {
			direct++
		}
		b, ok := bound[i]
		if !ok {
			continue
		}
		var last time.Time
		for _, g := range t.goneOn[t.node[i]] {
			if !g.After(b) {
				last = g
			}
		}
		if !last.IsZero() && !last.Before(c) {
			retry = append(retry, b.Sub(last))
		}
	}
	for name, g := range t.gone {
		if d, ok := t.deleting[name]; ok {
			del = append(del, g.Sub(d))
			if m, ok := t.marked[name]; ok {
				mark = append(mark, d.Sub(m))
			}
		}
	}
	return fmt.Sprintf("preemption steps (p50/p99 ms): creation->nominated %s (%d nominated, %d never); "+
		"victim marked->deleting %s, deleting->gone %s (%d victims); last victim gone->bound %s (%d)",
		pct(wait), len(wait), direct, pct(mark), pct(del), len(del), pct(retry), len(retry))
}

// pct formats p50/p99 of ds in ms ("-" when empty).
func pct(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	slices.Sort(ds)
	return fmt.Sprintf("%d/%d", ds[len(ds)/2].Milliseconds(), ds[len(ds)*99/100].Milliseconds())
}
