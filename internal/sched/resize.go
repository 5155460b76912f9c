package sched

import (
	"context"
	"fmt"
	"slices"

	"github.com/gpuslice/gpuslice/internal/resize"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// The resize controller (internal/resize) runs in the scheduler and books
// its grants in the plugin's books: a GPU granted to a running pod is booked
// before the new assignment is written, so the scheduling cycle never places
// a new pod on it, and a failed write gives it back.

var _ resize.Books = &Books{}

// pendingResize is a resize whose assignment is being written.
type pendingResize struct {
	from, to *api.Assignment
	fromRaw  string
	// obs is the latest assignment the pod informer delivered while the
	// write was in flight (obsRaw its annotation value).
	obs    *api.Assignment
	obsRaw string
}

// BeginResize implements resize.Books: under the books' lock it checks
// that the pod's booked annotation is fromRaw, plans against the node's free
// whole GPUs, and books the union of from and the plan (released GPUs stay
// booked until the write is settled, so a rollback always fits).
func (l *Books) BeginResize(uid, fromRaw string, from *api.Assignment, plan func(free []v1alpha2.GPU) *api.Assignment) (*api.Assignment, error) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.resizing[uid] != nil {
		return nil, fmt.Errorf("pod %s: a resize is already being written", uid)
	}
	if l.seen[uid] != fromRaw {
		return nil, fmt.Errorf("pod %s: %w", uid, resize.ErrBooksBehind)
	}
	var free []v1alpha2.GPU
	for _, g := range l.books.FreeWhole(from.Node, now) {
		free = append(free, v1alpha2.GPU{Index: g.Index, UUID: g.UUID, UnitsTotal: g.UnitsTotal, Memory: v1alpha2.Bytes(g.MemoryBytes), Health: v1alpha2.GPUHealthy})
	}
	to := plan(free)
	if to == nil {
		return nil, nil
	}
	if err := checkGrant(from, to, free); err != nil {
		return nil, err
	}
	l.books.Add(uid, union(from, to))
	l.resizing[uid] = &pendingResize{from: from, to: to, fromRaw: fromRaw}
	return to, nil
}

// EndResize implements resize.Books. Written: the books hold the new
// assignment, and updates of the pod that still carry the old annotation
// (delivered late by the informer) are ignored until the new one is seen.
// Not written: the books hold what the pod's annotation says.
func (l *Books) EndResize(uid, raw string, written bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.resizing[uid]
	if p == nil {
		return // the pod went away meanwhile
	}
	delete(l.resizing, uid)
	switch {
	case written:
		l.books.Add(uid, p.to)
		l.seen[uid] = raw
		l.stale[uid] = p.fromRaw
	case p.obs != nil:
		l.books.Add(uid, p.obs)
		l.seen[uid] = p.obsRaw
	default:
		l.books.Add(uid, p.from)
		l.seen[uid] = p.fromRaw
	}
}

// checkGrant verifies a plan: same node and containers, every GPU it adds
// is free and taken whole.
func checkGrant(from, to *api.Assignment, free []v1alpha2.GPU) error {
	if to.Node != from.Node || len(to.Containers) != len(from.Containers) {
		return fmt.Errorf("resize plan changes the node or the containers of the pod")
	}
	held := from.Totals()
	for i, c := range to.Containers {
		if c.Name != from.Containers[i].Name {
			return fmt.Errorf("resize plan renames container %q", from.Containers[i].Name)
		}
		for _, g := range c.GPUs {
			if _, ok := held[g.Index]; ok {
				continue
			}
			if !g.Exclusive || !slices.ContainsFunc(free, func(f v1alpha2.GPU) bool { return f.Index == g.Index }) {
				return fmt.Errorf("resize plan grants GPU %d of node %s, which is not free", g.Index, to.Node)
			}
		}
	}
	return nil
}

// union gives each container the GPUs it has in either assignment.
func union(from, to *api.Assignment) *api.Assignment {
	out := &api.Assignment{Version: to.Version, Node: to.Node}
	for i, c := range to.Containers {
		gpus := slices.Clone(c.GPUs)
		for _, g := range from.Containers[i].GPUs {
			if !slices.ContainsFunc(gpus, func(x api.GPUAssignment) bool { return x.Index == g.Index }) {
				gpus = append(gpus, g)
			}
		}
		out.Containers = append(out.Containers, api.ContainerAssignment{Name: c.Name, GPUs: gpus})
	}
	return out
}

// resizeBooks are the books as the resize controller sees it: settling a
// resize may free GPUs, so parked pods are re-activated.
type resizeBooks struct {
	*Books
	ctx  context.Context
	wait *waiters
}

func (b resizeBooks) EndResize(uid, raw string, written bool) {
	b.Books.EndResize(uid, raw, written)
	b.wait.wake(b.ctx)
}

// BeginShareResize implements resize.Books: under the books' lock it
// checks that the books hold the pod's annotation fromRaw and that every GPU
// fits to (the others' holdings plus to), then books the larger of from and
// to on each GPU until EndResize, so a rollback always fits. Refusals wrap
// resize.ErrNoRoom.
func (l *Books) BeginShareResize(uid, fromRaw string, from, to *api.Assignment) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.resizing[uid] != nil {
		return fmt.Errorf("pod %s: a resize is already being written", uid)
	}
	if l.seen[uid] != fromRaw {
		return fmt.Errorf("pod %s: %w", uid, resize.ErrBooksBehind)
	}
	if err := l.books.CheckChange(uid, to); err != nil {
		return fmt.Errorf("%w: %w", resize.ErrNoRoom, err)
	}
	l.books.Add(uid, larger(from, to))
	l.resizing[uid] = &pendingResize{from: from, to: to, fromRaw: fromRaw}
	return nil
}

// larger gives each container, on each GPU, the larger units and memory of
// from and to (same containers and GPUs: a share change).
func larger(from, to *api.Assignment) *api.Assignment {
	out := &api.Assignment{Version: to.Version, Node: to.Node}
	for i, c := range to.Containers {
		gpus := slices.Clone(c.GPUs)
		for j := range gpus {
			if i < len(from.Containers) && j < len(from.Containers[i].GPUs) {
				f := from.Containers[i].GPUs[j]
				gpus[j].Units = max(gpus[j].Units, f.Units)
				gpus[j].MemoryBytes = max(gpus[j].MemoryBytes, f.MemoryBytes)
			}
		}
		out.Containers = append(out.Containers, api.ContainerAssignment{Name: c.Name, GPUs: gpus})
	}
	return out
}
