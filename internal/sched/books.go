package sched

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/utils/clock"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// Allocator is what the plugin needs from the allocation state.
type Allocator interface {
	// Check tells whether req fits on node, or why not.
	Check(node string, req *api.PodRequest) error
	// Score rates placing req on node in [0, alloc.MaxScore].
	Score(node string, req *api.PodRequest) int64
	// Reserve fits req on node again and books the result for pod uid, atomically.
	Reserve(uid, node string, req *api.PodRequest) (*api.Assignment, error)
	// Floor returns the lowest priority below below of the pods booked (a
	// bound on the priority of any victim preemption can choose); ok is
	// false when there is none.
	Floor(below int32) (floor int32, ok bool)
	// Release returns what pod uid holds; unknown pods are ignored.
	Release(uid string)
	// Best names up to k nodes where req fits, best first; the nodes in
	// held as their overlays leave them (capacity held for nominated pods).
	Best(req *api.PodRequest, k int, held map[string]*alloc.Overlay) []string
	// Refusals tells why req fits on none of the first max nodes by name.
	Refusals(req *api.PodRequest, max int) []string
	// CheckWith and ReserveWith are Check and Reserve on the node as the
	// overlay leaves it (preemption's dry run, nominated pods).
	// ReserveWith also records the pod's priority (prio) for Floor.
	CheckWith(node string, req *api.PodRequest, o *alloc.Overlay) error
	ReserveWith(uid, node string, prio int32, req *api.PodRequest, o *alloc.Overlay) (*api.Assignment, error)
	// Victims chooses the fewest of cands to evict for req to fit on node
	// (alloc.Books.Victims).
	Victims(node string, req *api.PodRequest, o *alloc.Overlay, cands []alloc.Victim) ([]string, error)
	// Holds reports whether pod uid holds GPUs on node.
	Holds(uid, node string) bool
	// Policy is the placement policy for req (its own or the cluster's).
	Policy(req *api.PodRequest) api.Placement
}

// Books is the thread-safe Allocator the plugin uses (alloc.Books behind a
// lock, with a clock), fed by informers:
// GPUNode rows and the assignments of bound pods.
type Books struct {
	clock clock.PassiveClock
	mu    sync.RWMutex
	books *alloc.Books
	// index serializes the books' lazily rebuilt node index (Chunks) among
	// readers holding mu.RLock: concurrent Best calls would both build it.
	index sync.Mutex
	// seen holds the annotation last booked per pod, so the many updates
	// of a bound pod (status changes) cost no decoding.
	seen map[string]string
	// resizing holds the resizes being written (BeginResize..EndResize);
	// stale[uid] is an annotation value older than the one booked by a
	// resize, ignored until the booked one is observed.
	resizing map[string]*pendingResize
	stale    map[string]string
	// prio is the priority of each pod booked by ObservePod or Reserve
	// (until Release), prios how many of them have each priority: Floor
	// reads a handful of priorities instead of every pod of the cluster.
	prio  map[string]int32
	prios map[int32]int
	// busy: per node, the UUIDs of its GPUs measured above the
	// utilization threshold (the device view hides them from claims).
	busy map[string][]string
	cfg  alloc.Config
}

var _ Allocator = &Books{}

// NewBooks returns empty books.
func NewBooks(cfg alloc.Config, clk clock.PassiveClock) *Books {
	return &Books{clock: clk, books: alloc.NewBooks(cfg), seen: map[string]string{},
		resizing: map[string]*pendingResize{}, stale: map[string]string{}, prio: map[string]int32{}, prios: map[int32]int{},
		busy: map[string][]string{}, cfg: cfg}
}

// Check implements Allocator.
func (l *Books) Check(node string, req *api.PodRequest) error {
	now := l.clock.Now()
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.books.Check(node, req, now)
}

// Score implements Allocator.
func (l *Books) Score(node string, req *api.PodRequest) int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.books.Score(node, req)
}

// Policy implements Allocator.
func (l *Books) Policy(req *api.PodRequest) api.Placement {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.books.Policy(req)
}

// CheckWith implements Allocator.
func (l *Books) CheckWith(node string, req *api.PodRequest, o *alloc.Overlay) error {
	now := l.clock.Now()
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.books.CheckWith(node, req, now, o)
}

// Victims implements Allocator.
func (l *Books) Victims(node string, req *api.PodRequest, o *alloc.Overlay, cands []alloc.Victim) ([]string, error) {
	now := l.clock.Now()
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.books.Victims(node, req, now, o, cands)
}

// Holds implements Allocator.
func (l *Books) Holds(uid, node string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	a := l.books.Holding(uid)
	return a != nil && a.Node == node
}

// Reserve implements Allocator.
func (l *Books) Reserve(uid, node string, req *api.PodRequest) (*api.Assignment, error) {
	return l.ReserveWith(uid, node, 0, req, nil)
}

// ReserveWith implements Allocator: the pod is placed as if the overlay's
// pods (nominated to the node) were there first, and booked if it still fits
// what is booked.
func (l *Books) ReserveWith(uid, node string, prio int32, req *api.PodRequest, o *alloc.Overlay) (*api.Assignment, error) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if old := l.books.Holding(uid); old != nil {
		l.books.Release(uid) // a retried pod: its previous attempt's holding goes
		delete(l.seen, uid)
	}
	a, err := l.books.FitWith(node, req, now, o)
	if err != nil {
		return nil, err
	}
	if err := l.books.Reserve(uid, a); err != nil {
		return nil, err
	}
	l.setPriority(uid, prio)
	return a, nil
}

// setPriority records a booked pod's priority; l.mu is held for writing.
func (l *Books) setPriority(uid string, prio int32) {
	if old, ok := l.prio[uid]; ok {
		if old == prio {
			return
		}
		l.dropPriority(uid)
	}
	l.prio[uid] = prio
	l.prios[prio]++
}

// dropPriority forgets a pod's priority; l.mu is held for writing.
func (l *Books) dropPriority(uid string) {
	old, ok := l.prio[uid]
	if !ok {
		return
	}
	delete(l.prio, uid)
	if l.prios[old]--; l.prios[old] <= 0 {
		delete(l.prios, old)
	}
}

// Floor implements Allocator.
func (l *Books) Floor(below int32) (int32, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	floor, ok := int32(0), false
	for p := range l.prios {
		if p < below && (!ok || p < floor) {
			floor, ok = p, true
		}
	}
	return floor, ok
}

// Refusals implements Allocator.
func (l *Books) Refusals(req *api.PodRequest, max int) []string {
	now := l.clock.Now()
	l.mu.RLock()
	defer l.mu.RUnlock()
	l.index.Lock() // sortedNames caches like the index does
	defer l.index.Unlock()
	return l.books.Refusals(req, now, max)
}

// Best implements Allocator: every node is ranked, in two halves in
// parallel (a scheduler box has at least two cores).
func (l *Books) Best(req *api.PodRequest, k int, held map[string]*alloc.Overlay) []string {
	now := l.clock.Now()
	l.mu.RLock()
	defer l.mu.RUnlock()
	l.index.Lock()
	chunks := l.books.Chunks(2) // the index is then built: BestIn only reads it
	l.index.Unlock()
	lists := make([][]alloc.Ranked, len(chunks))
	var wg sync.WaitGroup
	for i, c := range chunks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lists[i] = l.books.BestIn(c, req, now, k, held)
		}()
	}
	wg.Wait()
	best := alloc.MergeBest(k, lists...)
	out := make([]string, len(best))
	for i, r := range best {
		out[i] = r.Node
	}
	return out
}

// Release implements Allocator.
func (l *Books) Release(uid string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.books.Release(uid)
	delete(l.seen, uid)
	delete(l.resizing, uid)
	delete(l.stale, uid)
	l.dropPriority(uid)
}

// SetGPUNode records a table row; an invalid row removes the node from
// placement and returns the validation error.
func (l *Books) SetGPUNode(n *v1alpha2.GPUNode) error {
	if err := n.Validate(); err != nil {
		l.RemoveGPUNode(n.Name)
		return err
	}
	row := alloc.NodeFromAPI(n)
	var busy []string
	for _, g := range row.GPUs {
		if l.cfg.Busy(g.UtilizationPercent) {
			busy = append(busy, g.UUID)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.books.SetNode(row)
	if len(busy) > 0 {
		l.busy[n.Name] = busy
	} else {
		delete(l.busy, n.Name)
	}
	return nil
}

// BusyGPUs are the UUIDs of the GPUs measured above the utilization
// threshold (nil: none), those of node except left out (a preemptor's
// nominated node: part of what was measured there is its victims' work,
// as the plugin path's freed GPUs, alloc.Books.candidates).
func (l *Books) BusyGPUs(except string) map[string]bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out map[string]bool
	for node, us := range l.busy {
		if node == except {
			continue
		}
		if out == nil {
			out = map[string]bool{}
		}
		for _, u := range us {
			out[u] = true
		}
	}
	return out
}

// SetLease records a node agent's Lease and reports whether it revived
// the node (it had none, or an expired one, and now holds a live one).
func (l *Books) SetLease(node string, le alloc.Lease) (revived bool) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	was := l.books.Live(node, now)
	l.books.SetLease(node, le)
	return !was && l.books.Live(node, now)
}

// RemoveLease forgets a node agent's Lease: the node is stale.
func (l *Books) RemoveLease(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.books.RemoveLease(node)
}

// RemoveGPUNode forgets a table row.
func (l *Books) RemoveGPUNode(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.books.RemoveNode(name)
	delete(l.busy, name)
}

// ObservePod books the assignment of a bound, running pod and releases a
// terminated one. Pods that are not bound yet are left to the scheduling
// cycle. A malformed annotation, or one naming another node, is returned as
// an error and books nothing.
func (l *Books) ObservePod(pod *corev1.Pod) error {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		l.Release(string(pod.UID))
		return nil
	}
	raw, ok := pod.Annotations[api.AnnotationAssignment]
	if !ok || pod.Spec.NodeName == "" {
		return nil
	}
	uid := string(pod.UID)
	l.mu.RLock()
	same := l.seen[uid] == raw && l.resizing[uid] == nil && l.stale[uid] == ""
	l.mu.RUnlock()
	if same {
		return nil
	}
	a, err := api.ParseAssignment(raw)
	if err != nil {
		return err
	}
	if a.Node != pod.Spec.NodeName {
		return fmt.Errorf("%w: assignment names node %q, pod is bound to %q", api.ErrInvalidAssignment, a.Node, pod.Spec.NodeName)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.observeLocked(uid, raw, a)
	l.setPriority(uid, corev1helpers.PodPriority(pod))
	return nil
}

// observeLocked books a bound pod's assignment annotation, unless a resize
// of the pod is being written (EndResize settles it) or the value is one a
// resize has just replaced (a late update from before the write).
func (l *Books) observeLocked(uid, raw string, a *api.Assignment) {
	if p := l.resizing[uid]; p != nil {
		p.obs, p.obsRaw = a, raw
		return
	}
	if l.seen[uid] == raw {
		delete(l.stale, uid)
		return
	}
	if old, ok := l.stale[uid]; ok && old == raw {
		return
	}
	delete(l.stale, uid)
	l.books.Add(uid, a)
	l.seen[uid] = raw
}

// Quality reports the placement quality of the current holdings.
func (l *Books) Quality() alloc.Quality {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.books.Quality()
}

// Usage returns the holdings on a node's GPUs.
func (l *Books) Usage(node string) map[int32]alloc.Usage {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.books.Usage(node)
}
