package timeslice

import (
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// gpuState is one GPU: its policy instance and the groups (tenants) using it.
// A group's grant is shared by its member connections: every member that
// asks while the group holds the GPU gets the same grant, and the group hands
// the GPU back when its last holding member releases (or disconnects).
type gpuState struct {
	mu     sync.Mutex
	uuid   proto.UUID
	sched  *policy.Scheduler
	groups map[string]*tenant
	byID   map[policy.ID]*tenant
	nextID policy.ID
	timer  *time.Timer
	log    klog.Logger
	// budgets keeps the ceiling budget (share.max) of groups that left this
	// GPU while it still mattered, for when they come back (at most
	// maxBudgets; expired ones are dropped).
	budgets map[string]policy.Budget
	// turns counts the slices handed out (grants and renewals); obs is
	// Config.Observe (nil: none).
	turns  uint64
	obs    *Observer
	passed uint64 // the policy's turns passed for want of work, at the last slice observed
}

// maxBudgets bounds gpuState.budgets.
const maxBudgets = 4096

type tenant struct {
	id      policy.ID
	group   string
	members map[*conn]*member
	grant   policy.Grant
	holding bool
	// revokes counts grants ended early or at their end by the daemon;
	// granted sums the lengths of the grants handed out.
	revokes uint64
	granted time.Duration
	// turn is the GPU's turn count when the running grant was given or last renewed.
	turn uint64
}

type member struct {
	waiting, holding bool
	// askedAt and askedTurn: when the member started waiting, and the
	// GPU's turn count then.
	askedAt   time.Time
	askedTurn uint64
}

// wait marks m waiting from now (if it was not already).
func (g *gpuState) wait(m *member, now time.Time) {
	if !m.waiting {
		m.waiting, m.askedAt, m.askedTurn = true, now, g.turns
	}
}

// served tells the observer that waiting member m of t got a grant now, as
// slice turn (its group's running grant: the turn it was given).
func (g *gpuState) served(t *tenant, m *member, now time.Time, turn uint64) {
	if g.obs == nil || g.obs.Wait == nil {
		return
	}
	var turns uint64
	if turn > m.askedTurn+1 {
		turns = turn - m.askedTurn - 1
	}
	g.obs.Wait(g.uuid, t.group, now.Sub(m.askedAt), turns)
}

// held tells the observer that t's grant ends now.
func (g *gpuState) held(t *tenant, now time.Time) {
	if g.obs != nil && g.obs.Held != nil {
		g.obs.Held(g.uuid, t.group, max(now.Sub(t.grant.Start), 0))
	}
}

// sliced tells the observer of a slice handed out (renewed: the running
// grant's, which happens only with no other group waiting).
func (g *gpuState) sliced(t *tenant, length time.Duration, renewed bool) {
	g.turns++
	if g.obs == nil || g.obs.Slice == nil {
		return
	}
	var passed uint64
	for _, st := range g.sched.Stats(time.Now()) {
		passed += st.Passed
	}
	contended := !renewed && passed == g.passed
	g.passed = passed
	g.obs.Slice(g.uuid, t.group, length, g.turns, contended)
}

func (t *tenant) any(f func(*member) bool) bool {
	for _, m := range t.members {
		if f(m) {
			return true
		}
	}
	return false
}

func isWaiting(m *member) bool { return m.waiting }
func isHolding(m *member) bool { return m.holding }

func newGPU(uuid proto.UUID, cfg policy.Config, obs *Observer, log klog.Logger) (*gpuState, error) {
	s, err := policy.New(cfg)
	if err != nil {
		return nil, err
	}
	g := &gpuState{uuid: uuid, sched: s, groups: map[string]*tenant{}, byID: map[policy.ID]*tenant{},
		log: log.WithValues("gpu", uuid.String()), budgets: map[string]policy.Budget{}, obs: obs}
	g.timer = time.AfterFunc(time.Hour, g.tick)
	g.timer.Stop()
	return g, nil
}

// acquire: member c of its group has work.
func (g *gpuState) acquire(c *conn, p policy.Params) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	name := c.groupOn(g.uuid)
	t := g.groups[name]
	if t == nil {
		g.nextID++
		if err := g.sched.Add(g.nextID, p); err != nil {
			return err
		}
		if b, ok := g.budgets[name]; ok { // back before its overdraft was repaid
			delete(g.budgets, name)
			if err := g.sched.Restore(g.nextID, b); err != nil {
				return err
			}
		}
		t = &tenant{id: g.nextID, group: name, members: map[*conn]*member{}}
		g.groups[t.group], g.byID[t.id] = t, t
	}
	m := t.members[c]
	if m == nil {
		m = &member{}
		t.members[c] = m
	}
	g.join(t, m, c, now)
	return nil
}

// release: member c finished grant seq; more says it still has work.
func (g *gpuState) release(c *conn, seq uint64, more bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.groups[c.groupOn(g.uuid)]
	if t == nil || t.members[c] == nil {
		return
	}
	m := t.members[c]
	now := time.Now()
	if !m.holding || !t.holding || t.grant.Seq != seq { // stale: that grant is over
		if more {
			g.join(t, m, c, now)
		}
		return
	}
	m.holding = false
	if more {
		g.wait(m, now)
	}
	if t.any(isHolding) {
		if more { // this member waits for the group's next turn: not a renewal of this one
			g.apply(g.sched.Queued(t.id), now)
		}
		return
	}
	g.groupRelease(t, now)
}

// join makes member m wait for the GPU, or share its group's running grant.
func (g *gpuState) join(t *tenant, m *member, c *conn, now time.Time) {
	g.wait(m, now)
	if t.holding {
		g.served(t, m, now, t.turn)
		m.holding, m.waiting = true, false
		c.sendGrant(g.uuid, t.grant, now)
		return
	}
	acts, err := g.sched.Acquire(t.id, now)
	if err != nil {
		g.log.Error(err, "acquire", "group", t.group)
	}
	g.apply(acts, now)
}

// groupRelease hands the group's grant back to the policy.
func (g *gpuState) groupRelease(t *tenant, now time.Time) {
	t.holding = false
	g.held(t, now)
	acts, err := g.sched.Release(t.id, t.grant.Seq, now, t.any(isWaiting))
	if err != nil {
		g.log.Error(err, "release", "group", t.group)
	}
	g.apply(acts, now)
}

// disconnect drops member c: a holder loses its grant at once.
func (g *gpuState) disconnect(c *conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	t := g.groups[c.groupOn(g.uuid)]
	if t == nil || t.members[c] == nil {
		return
	}
	delete(t.members, c)
	if len(t.members) == 0 {
		delete(g.groups, t.group)
		delete(g.byID, t.id)
		g.keepBudget(t, now)
		g.apply(g.sched.Remove(t.id, now), now)
		return
	}
	if t.holding && !t.any(isHolding) {
		g.groupRelease(t, now)
	}
}

// keepBudget remembers the ceiling budget of a group leaving the GPU, so a
// group cannot start a fresh one by disconnecting and coming back.
func (g *gpuState) keepBudget(t *tenant, now time.Time) {
	b, ok := g.sched.Budget(t.id, now)
	if !ok || !b.Until.After(now) {
		return
	}
	if len(g.budgets) >= maxBudgets {
		for name, o := range g.budgets {
			if !o.Until.After(now) {
				delete(g.budgets, name)
			}
		}
	}
	if len(g.budgets) < maxBudgets {
		g.budgets[t.group] = b
	}
}

// update applies new settings of a group; a changed ceiling applies at once
// (a group it held back may go now).
func (g *gpuState) update(groupName string, p policy.Params) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t := g.groups[groupName]; t != nil {
		if err := g.sched.Update(t.id, p); err != nil {
			return err
		}
		now := time.Now()
		g.apply(g.sched.Tick(now), now)
	}
	return nil
}

func (g *gpuState) tick() {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	g.apply(g.sched.Tick(now), now)
}

// apply carries out the policy's actions, then re-arms the deadline timer.
func (g *gpuState) apply(acts []policy.Action, now time.Time) {
	var again []*tenant
	for _, a := range acts {
		t := g.byID[a.Tenant]
		if t == nil {
			continue
		}
		switch a.Kind {
		case policy.ActGrant:
			g.grant(t, a.Grant, now)
		case policy.ActRenew:
			g.renew(t, a.Grant, now)
		case policy.ActRevoke:
			reason := proto.RevokeSliceEnd
			if now.Before(a.Grant.End) {
				reason = proto.RevokePreempt
			}
			t.revokes++
			for c, m := range t.members {
				if m.holding {
					c.sendRevoke(g.uuid, a.Grant.Seq, reason)
				}
			}
		case policy.ActExpire:
			t.holding = false
			g.held(t, now)
			t.revokes++
			for c, m := range t.members {
				if m.holding {
					m.holding = false
					c.sendRevoke(g.uuid, a.Grant.Seq, proto.RevokeExpired)
					if a.Again { // it never said it was done: the group's next turn is its too
						g.wait(m, now)
					}
				}
			}
			g.log.V(2).Info("grant expired", "group", t.group, "seq", a.Grant.Seq, "again", a.Again)
			// Members of its group still waiting (they handed their part
			// back and asked for more, or held the void grant and the
			// policy keeps the group's place) wait for the group's next turn.
			if t.any(isWaiting) {
				again = append(again, t)
			}
		}
	}
	for _, t := range again {
		g.reacquire(t, now)
	}
	if at, ok := g.sched.NextDeadline(); ok {
		g.timer.Reset(time.Until(at))
	} else {
		g.timer.Stop()
	}
}

// reacquire puts a group with waiting members back in line (after its grant expired).
func (g *gpuState) reacquire(t *tenant, now time.Time) {
	if g.byID[t.id] != t || t.holding || !t.any(isWaiting) {
		return
	}
	acts, err := g.sched.Acquire(t.id, now)
	if err != nil {
		g.log.Error(err, "acquire", "group", t.group)
	}
	g.apply(acts, now)
}

// grant gives the group's waiting members the GPU; a group with no one
// waiting any more hands it straight back.
func (g *gpuState) grant(t *tenant, gr policy.Grant, now time.Time) {
	t.grant, t.holding = gr, true
	t.granted += max(gr.End.Sub(gr.Start), 0)
	g.sliced(t, max(gr.End.Sub(gr.Start), 0), false)
	t.turn = g.turns
	sent := false
	for c, m := range t.members {
		if m.waiting {
			g.served(t, m, now, t.turn)
			m.waiting, m.holding = false, true
			c.sendGrant(g.uuid, gr, now)
			sent = true
		}
	}
	if !sent {
		g.groupRelease(t, now)
	}
}

// renew sends a group's renewed grant (same seq, later end) to its holding
// members that understand renewals; the others hand over at the old end, and
// their group's grant goes back to the policy when its last holder releases.
func (g *gpuState) renew(t *tenant, gr policy.Grant, now time.Time) {
	if !t.holding || t.grant.Seq != gr.Seq {
		return
	}
	if more := gr.End.Sub(t.grant.End); more > 0 { // else an update only (Alone cleared): not a new slice
		t.granted += more
		g.sliced(t, more, true)
		t.turn = g.turns
	}
	t.grant = gr
	for c, m := range t.members {
		if m.holding && c.features&proto.FeatureRenew != 0 {
			c.sendRenewal(g.uuid, gr, now)
		}
	}
}

// snapshot returns the policy's view of every group on this GPU.
func (g *gpuState) snapshot(now time.Time) []groupStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []groupStats
	for _, st := range g.sched.Stats(now) {
		if t := g.byID[st.ID]; t != nil {
			out = append(out, groupStats{Group: t.group, Members: len(t.members), Revokes: t.revokes, Granted: t.granted, TenantStats: st})
		}
	}
	return out
}

type groupStats struct {
	Group   string
	Members int
	Revokes uint64
	Granted time.Duration
	policy.TenantStats
}
