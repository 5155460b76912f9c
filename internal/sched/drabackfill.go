package sched

import (
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"
)

// Backfill with reservation for pods with ResourceClaims: a pod that needs
// whole devices and has found none free for reserveAfter gets a node
// reserved (the node of its Filter candidates whose devices hold the least);
// pods of no higher priority that need only shares are then refused that
// node while any other has room for them (they are backfilled elsewhere),
// so its devices drain and the waiting pod binds. A reservation ends when
// its pod is bound or deleted, or after reserveTTL (a pod that cannot use
// the node does not keep it from others for ever).
const (
	reserveAfter = 5 * time.Second
	reserveTTL   = 2 * time.Minute
)

type reservation struct {
	node  string
	prio  int32
	since time.Time
}

// reservations are the backfill's state: since when each whole-device pod
// waits, and the node reserved for it.
type reservations struct {
	mu      sync.Mutex
	waiting map[types.UID]time.Time
	byPod   map[types.UID]reservation
}

func newReservations() *reservations {
	return &reservations{waiting: map[types.UID]time.Time{}, byPod: map[types.UID]reservation{}}
}

// failed records that pod (needing whole devices) fit nowhere at now; it
// reports whether the pod has waited long enough for a reservation and has
// none yet.
func (r *reservations) failed(pod types.UID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	first, ok := r.waiting[pod]
	if !ok {
		r.waiting[pod] = now
		return false
	}
	res, has := r.byPod[pod]
	if has && now.Sub(res.since) < reserveTTL {
		return false
	}
	return now.Sub(first) >= reserveAfter
}

// reserve reserves node for pod (priority prio) at now.
func (r *reservations) reserve(pod types.UID, node string, prio int32, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byPod[pod] = reservation{node: node, prio: prio, since: now}
}

// heldFrom names the pod for which node is reserved against a pod of
// priority prio (other than pod itself; reservations of lower priority and
// expired ones do not count), or "".
func (r *reservations) heldFrom(pod types.UID, prio int32, node string, now time.Time) types.UID {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, res := range r.byPod {
		if uid != pod && res.node == node && res.prio >= prio && now.Sub(res.since) < reserveTTL {
			return uid
		}
	}
	return ""
}

// forget ends pod's wait and reservation (bound or deleted).
func (r *reservations) forget(pod types.UID) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.waiting, pod)
	delete(r.byPod, pod)
}

// reservedAgainst is the pod a node is reserved for against pod, when pod
// needs only shares; "" when it may go there.
func (p *Plugin) reservedAgainst(c *cycle, pod *corev1.Pod, node string, now time.Time) types.UID {
	if p.preempt == nil || p.preempt.backfill == nil || c.draNeed.whole {
		return ""
	}
	return p.preempt.backfill.heldFrom(pod.UID, corev1helpers.PodPriority(pod), node, now)
}

// reserveFor reserves a node for pod, which needs whole devices and fit
// nowhere, once it has waited reserveAfter: of the nodes whose devices
// DynamicResources found taken (m), not reserved already, the one whose
// devices hold the least.
func (p *Plugin) reserveFor(pod *corev1.Pod, m fwk.NodeToStatusReader, now time.Time) {
	pr := p.preempt
	if pr == nil || pr.backfill == nil || pr.dra == nil || !pr.backfill.failed(pod.UID, now) {
		return
	}
	nis, err := m.NodesForStatusCode(pr.fh.SnapshotSharedLister().NodeInfos(), fwk.Unschedulable)
	if err != nil || len(nis) == 0 {
		return
	}
	prio := corev1helpers.PodPriority(pod)
	nodes := sets.New[string]()
	for _, ni := range nis {
		if n := ni.Node().Name; pr.backfill.heldFrom(pod.UID, prio, n, now) == "" {
			nodes.Insert(n)
		}
	}
	use, err := pr.dra.usage(nodes, nil, nil)
	if err != nil || len(use) == 0 {
		return
	}
	names := make([]string, 0, len(use))
	for n, u := range use {
		if u.n > 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Slice(names, func(i, j int) bool {
		if a, b := use[names[i]].used/float64(use[names[i]].n), use[names[j]].used/float64(use[names[j]].n); a != b {
			return a < b
		}
		return names[i] < names[j]
	})
	pr.backfill.reserve(pod.UID, names[0], prio, now)
	p.events.Reserved(pod, names[0])
}
