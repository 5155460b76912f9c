package sched

import (
	"sort"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
)

// claimChanges numbers the changes of claim allocations the scheduler's
// claim informer delivers, and remembers per pool (driver/pool) the last
// one on a device of it: a preemption's dry run reads a node with the
// allocated state PreFilter gathered when nothing on the node's pools
// changed since (draSnapshot.heldOn) instead of gathering it again (a copy
// of every allocated device's consumed capacity, per preemptor). A nil
// claimChanges knows nothing: every pool counts as changed. The tracker's
// own handler and this one may see an event in either order: a claim
// allocated, within that gap, for a pod not on the node is missed (as a
// gather misses one allocated just after it); a release, or an allocation
// of the node's pods' claims, shows in the dry run's agreement check
// (podClaimsAgree) however the handlers ran.
type claimChanges struct {
	mu   sync.Mutex
	seq  uint64
	last map[string]uint64 // poolKey -> seq of its last change
	// any: the last change whose pools are not known (every pool's).
	any uint64
	// log: the pools changed, in order of their changes (changedSince);
	// at most logCap, the older half dropped past it (dropped: the last
	// change dropped).
	log     []poolChange
	dropped uint64
}

// poolChange is a change on one pool.
type poolChange struct {
	seq uint64
	key string // poolKey
}

// logCap bounds claimChanges' log (a reader behind it counts every pool
// changed).
const logCap = 8192

func newClaimChanges() *claimChanges { return &claimChanges{last: map[string]uint64{}} }

// now is the number of the last change so far: read before a state is
// gathered, it dates that state.
func (c *claimChanges) now() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// touch records a change of the claims' allocations (a claim allocated,
// deallocated, or deleted allocated) on the pools they were allocated on;
// a nil claim (an object that is not one) changed every pool.
func (c *claimChanges) touch(claims ...*resourceapi.ResourceClaim) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.trim()
	c.seq++
	for _, cl := range claims {
		if cl == nil {
			c.any = c.seq
			continue
		}
		if cl.Status.Allocation == nil {
			continue
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			k := poolKey(r.Driver, r.Pool)
			c.last[k] = c.seq
			c.log = append(c.log, poolChange{seq: c.seq, key: k})
		}
	}
}

// trim drops the older half of the log past logCap (c.mu held).
func (c *claimChanges) trim() {
	if len(c.log) <= logCap {
		return
	}
	half := len(c.log) / 2
	c.dropped = c.log[half-1].seq
	c.log = append(c.log[:0:0], c.log[half:]...)
}

// changedSince calls changed with the key of each pool changed after
// change seq (c.mu held meanwhile: changed must not call c) and returns
// the number of the last change; all: every pool counts as changed (a
// change of unknown pools, or the log dropped changes after seq; a nil
// claimChanges).
func (c *claimChanges) changedSince(seq uint64, changed func(key string)) (now uint64, all bool) {
	if c == nil {
		return 0, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.any > seq || c.dropped > seq {
		return c.seq, true
	}
	i := sort.Search(len(c.log), func(i int) bool { return c.log[i].seq > seq })
	for _, ch := range c.log[i:] {
		changed(ch.key)
	}
	return c.seq, false
}

// since tells whether a claim allocation on one of pools changed after
// change seq (a nil claimChanges: always).
func (c *claimChanges) since(pools sets.Set[string], seq uint64) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.any > seq {
		return true
	}
	for p := range pools {
		if c.last[p] > seq {
			return true
		}
	}
	return false
}

// handler is the claim informer's handler feeding c: as the claim
// tracker's own (its allocated devices), a claim counts when its
// allocation appears or goes, or it is added or deleted allocated.
func (c *claimChanges) handler() cache.ResourceEventHandler {
	claim := func(obj any) *resourceapi.ResourceClaim {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		rc, _ := obj.(*resourceapi.ResourceClaim)
		return rc
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if rc := claim(obj); rc != nil && rc.Status.Allocation != nil {
				c.touch(rc)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, cur := claim(oldObj), claim(newObj)
			if old == nil || cur == nil || (old.Status.Allocation == nil) != (cur.Status.Allocation == nil) {
				c.touch(old, cur) // (allocations are immutable once made: appeared or gone)
			}
		},
		DeleteFunc: func(obj any) {
			if rc := claim(obj); rc == nil || rc.Status.Allocation != nil {
				c.touch(rc)
			}
		},
	}
}

// touchAllocated records a change on the pools claim c was allocated on (a
// nil c, or one not allocated: none).
func (c *claimChanges) touchAllocated(cl *resourceapi.ResourceClaim) {
	if cl != nil && cl.Status.Allocation != nil {
		c.touch(cl)
	}
}
