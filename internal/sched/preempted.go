package sched

import (
	"slices"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// preempted remembers, per preemptor, the victims its last preemption
// evicted, until the plugin's books have released them all. A preemptor
// retried before that (the scheduler saw a victim deleted before the books
// did, or its own nomination in the pod's status is not back yet) must not
// preempt again: Filter still counts the victims' GPUs, and a second
// preemption would evict more pods than the first one freed (on a loaded
// scheduler all four pods of a GPU went for one victim's room).
type preempted struct {
	mu sync.Mutex
	// dry is each pod's victims per node of its current preemption's dry
	// run; the chosen node's become final in commit.
	dry map[types.UID]map[string][]string
	// final is each pod's victims on the node it was nominated to, and when.
	final map[types.UID]evicted
	// ttl bounds how long a preemptor waits on its victims (a victim the
	// books never see released, a preemptor deleted meanwhile).
	ttl time.Duration
	// nominated is each preemptor's last nomination (as kube-scheduler's
	// nominator has it), until it is bound or deleted or its nomination
	// cleared: what PreFilter holds for it. Kept here because asking the
	// nominator copies every nominated pod per node asked (with a burst of
	// preemptors, most of PreFilter's CPU and garbage).
	nominated map[types.UID]nomination
	seq       uint64 // nominations so far: their order
	// dryGPUs: per pod and node of its current dry run, the GPUs (UUIDs)
	// the chosen victims' ResourceClaims free there; freed: those of the
	// node it was nominated to, from commit until it is bound or deleted
	// (the device view shows them to it although measured busy: part of
	// what was measured is the victims' work).
	dryGPUs map[types.UID]map[string][]string
	freed   map[types.UID][]string
}

// nomination is where a preemptor was nominated, with what it asks.
type nomination struct {
	node string
	prio int32
	req  *api.PodRequest
	seq  uint64
}

type evicted struct {
	node    string
	victims []string // pod UIDs
	at      time.Time
}

func newPreempted(ttl time.Duration) *preempted {
	return &preempted{dry: map[types.UID]map[string][]string{}, final: map[types.UID]evicted{}, ttl: ttl,
		nominated: map[types.UID]nomination{}, dryGPUs: map[types.UID]map[string][]string{}, freed: map[types.UID][]string{}}
}

// chose records the victims a dry run chose for pod on node.
func (p *preempted) chose(pod types.UID, node string, victims []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dry[pod] == nil {
		p.dry[pod] = map[string][]string{}
	}
	p.dry[pod][node] = victims
}

// choseGPUs records the GPUs (UUIDs) the victims a dry run chose for pod
// on node free there (DRA: their claims' devices).
func (p *preempted) choseGPUs(pod types.UID, node string, gpus []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dryGPUs[pod] == nil {
		p.dryGPUs[pod] = map[string][]string{}
	}
	p.dryGPUs[pod][node] = gpus
}

// freedGPUs are the GPUs pod's last preemption freed on the node it was
// nominated to (choseGPUs), until it is bound or deleted.
func (p *preempted) freedGPUs(pod types.UID) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.freed[pod]
}

// commit ends pod's preemption: nominated to node ("" none), whose dry-run
// victims are being evicted at now. It returns those victims.
func (p *preempted) commit(pod types.UID, node string, now time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for uid, e := range p.final { // preemptors deleted while they waited
		if now.Sub(e.at) >= p.ttl {
			delete(p.final, uid)
		}
	}
	v := p.dry[pod][node]
	if node == "" {
		v = nil
	}
	if len(v) > 0 {
		p.final[pod] = evicted{node: node, victims: v, at: now}
	}
	if g := p.dryGPUs[pod][node]; node != "" && len(g) > 0 {
		p.freed[pod] = g
	} else {
		delete(p.freed, pod)
	}
	delete(p.dry, pod)
	delete(p.dryGPUs, pod)
	return v
}

// nominate records pod's nomination to node ("" clears it, as a
// preemption that found no node does in kube-scheduler's nominator), with
// its priority and request.
func (p *preempted) nominate(pod types.UID, node string, prio int32, req *api.PodRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if node == "" {
		delete(p.nominated, pod)
		return
	}
	p.seq++
	p.nominated[pod] = nomination{node: node, prio: prio, req: req, seq: p.seq}
}

// held is, per node, the capacity held there for the preemptors other than
// pod of at least priority prio that were nominated to it and do not hold
// it yet (holds), in the order they were nominated.
func (p *preempted) held(pod types.UID, prio int32, holds func(uid, node string) bool) map[string]*alloc.Overlay {
	p.mu.Lock()
	type entry struct {
		uid string
		n   nomination
	}
	var es []entry
	for uid, n := range p.nominated {
		if uid != pod && n.prio >= prio && n.req != nil && !n.req.Empty() {
			es = append(es, entry{string(uid), n})
		}
	}
	p.mu.Unlock()
	sort.Slice(es, func(i, j int) bool { return es[i].n.seq < es[j].n.seq })
	var out map[string]*alloc.Overlay
	for _, e := range es {
		if holds(e.uid, e.n.node) {
			continue
		}
		if out == nil {
			out = map[string]*alloc.Overlay{}
		}
		o := out[e.n.node]
		if o == nil {
			o = &alloc.Overlay{}
			out[e.n.node] = o
		}
		o.Add(e.uid, e.n.req)
	}
	return out
}

// waitsOnOthers reports whether pod waits (at now, within the ttl) for
// victims of its own of which freed is not one: capacity freed by freed is
// another preemptor's, and retrying pod for it would only find its own
// victims still there. Past the ttl it may preempt again: any release
// counts.
func (p *preempted) waitsOnOthers(pod, freed types.UID, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.final[pod]
	return ok && now.Sub(e.at) < p.ttl && !slices.Contains(e.victims, string(freed))
}

// waiting tells whether pod must wait for its last victims: some are
// still held in the books (holds), and the wait is younger than ttl.
// Otherwise the record goes.
func (p *preempted) waiting(pod types.UID, now time.Time, holds func(uid, node string) bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.final[pod]
	if !ok {
		return false
	}
	if now.Sub(e.at) < p.ttl {
		for _, v := range e.victims {
			if holds(v, e.node) {
				return true
			}
		}
	}
	delete(p.final, pod)
	return false
}

// forget drops what is known of pod (bound or deleted).
func (p *preempted) forget(pod types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.dry, pod)
	delete(p.final, pod)
	delete(p.nominated, pod)
	delete(p.dryGPUs, pod)
	delete(p.freed, pod)
}
