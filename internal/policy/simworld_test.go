package policy

import (
	"container/heap"
	"time"
)

// A discrete-event model of one GPU, the scheduler behind a socket, and client
// libraries gating kernel launches the way libgpuslice's gate does: a held,
// unexpired grant lets a launch through at once; at most maxInflight kernels are
// outstanding; when the grant ends or is revoked the client waits for its
// outstanding kernels, then releases and waits for the next grant; a client that
// stays idle releases its grant.

type event struct {
	at  time.Time
	seq int
	fn  func()
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	return q[i].at.Before(q[j].at) || q[i].at.Equal(q[j].at) && q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type kernel struct {
	owner *client
	dur   time.Duration
}

type world struct {
	now      time.Time
	q        eventQueue
	seq      int
	sched    *Scheduler
	oneWay   time.Duration // socket message delay
	window   time.Duration
	queue    []kernel // the GPU's single engine, FIFO
	running  bool
	busy     map[ID][]time.Duration // GPU time per tenant per window
	tickGen  int
	clients  []*client
	inflight int // kernels per client at most (the gate's bound)
	idle     time.Duration
	releases int // hand-overs (releases with more work)
}

func newWorld(cfg Config, window time.Duration) *world {
	s, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return &world{now: t0, sched: s, oneWay: 20 * time.Microsecond, window: window,
		busy: map[ID][]time.Duration{}, inflight: 2, idle: 500 * time.Microsecond}
}

func (w *world) at(t time.Time, fn func()) {
	w.seq++
	heap.Push(&w.q, event{at: t, seq: w.seq, fn: fn})
}

func (w *world) after(d time.Duration, fn func()) { w.at(w.now.Add(d), fn) }

func (w *world) run(until time.Time) {
	for w.q.Len() > 0 {
		e := heap.Pop(&w.q).(event)
		if e.at.After(until) {
			return
		}
		w.now = e.at
		e.fn()
	}
}

// daemon calls a scheduler method on the daemon side and delivers its actions.
func (w *world) daemon(call func(now time.Time) []Action) {
	w.after(w.oneWay, func() {
		w.deliver(call(w.now))
		w.armTick()
	})
}

func (w *world) armTick() {
	w.tickGen++
	gen := w.tickGen
	if at, ok := w.sched.NextDeadline(); ok {
		w.at(at, func() {
			if gen == w.tickGen {
				w.deliver(w.sched.Tick(w.now))
				w.armTick()
			}
		})
	}
}

func (w *world) deliver(acts []Action) {
	for _, a := range acts {
		c := w.clients[a.Tenant]
		g, sent := a.Grant, w.now
		switch a.Kind {
		case ActGrant:
			w.after(w.oneWay, func() { c.onGrant(g.Seq, w.now.Add(g.End.Sub(sent))) })
		case ActRenew:
			w.after(w.oneWay, func() { c.onRenew(g.Seq, w.now.Add(g.End.Sub(sent))) })
		case ActRevoke, ActExpire:
			w.after(w.oneWay, func() { c.onRevoke(g.Seq) })
		}
	}
}

// submit queues a kernel on the GPU engine.
func (w *world) submit(k kernel) {
	w.queue = append(w.queue, k)
	if !w.running {
		w.startNext()
	}
}

func (w *world) startNext() {
	if len(w.queue) == 0 {
		w.running = false
		return
	}
	k := w.queue[0]
	w.queue = w.queue[1:]
	w.running = true
	start := w.now
	w.after(k.dur, func() {
		w.account(k.owner.id, start, w.now)
		k.owner.kernelDone()
		w.startNext()
	})
}

// account adds [from, to) to id's GPU time, split by window.
func (w *world) account(id ID, from, to time.Time) {
	for from.Before(to) {
		i := int(from.Sub(t0) / w.window)
		end := t0.Add(time.Duration(i+1) * w.window)
		if to.Before(end) {
			end = to
		}
		b := w.busy[id]
		for len(b) <= i {
			b = append(b, 0)
		}
		b[i] += end.Sub(from)
		w.busy[id] = b
		from = end
	}
}

type client struct {
	w        *world
	id       ID
	holding  bool
	seq      uint64
	until    time.Time
	revoked  bool
	asked    bool // an acquire is outstanding
	inflight int
	inLaunch bool // the program is inside a launch (blocked or not)
	lastUse  time.Time
	// continuations
	onGranted []func()
	onSlot    []func()
	onDrained []func()
}

func (w *world) addClient(p Params) *client {
	c := &client{w: w, id: ID(len(w.clients))}
	w.clients = append(w.clients, c)
	if err := w.sched.Add(c.id, p); err != nil {
		panic(err)
	}
	return c
}

// launch gates and enqueues one kernel, then calls cont (the launch returned).
func (c *client) launch(d time.Duration, cont func()) {
	c.inLaunch = true
	w := c.w
	switch {
	case c.holding && !c.revoked && w.now.Before(c.until):
		if c.inflight >= w.inflight {
			c.onSlot = append(c.onSlot, func() { c.launch(d, cont) })
			return
		}
		c.inflight++
		c.lastUse = w.now
		w.submit(kernel{owner: c, dur: d})
		c.inLaunch = false
		cont()
	case c.holding: // slice over: finish outstanding work, hand over, wait
		c.sync(func() {
			if c.holding {
				c.release(true)
			}
			c.launch(d, cont)
		})
	default:
		c.onGranted = append(c.onGranted, func() { c.launch(d, cont) })
		if !c.asked {
			c.asked = true
			w.daemon(func(now time.Time) []Action { a, _ := w.sched.Acquire(c.id, now); return a })
		}
	}
}

// sync waits until the client's kernels are done.
func (c *client) sync(cont func()) {
	if c.inflight == 0 {
		cont()
		return
	}
	c.onDrained = append(c.onDrained, cont)
}

func (c *client) release(more bool) {
	seq := c.seq
	if more {
		c.w.releases++
	}
	c.holding, c.revoked = false, false
	c.asked = more // a release with more work left also asks for the next grant
	c.w.daemon(func(now time.Time) []Action { a, _ := c.w.sched.Release(c.id, seq, now, more); return a })
}

func (c *client) onGrant(seq uint64, until time.Time) {
	c.asked = false
	c.holding, c.seq, c.until, c.revoked = true, seq, until, false
	c.lastUse = c.w.now
	c.armIdle()
	run := c.onGranted
	c.onGranted = nil
	for _, f := range run {
		f()
	}
}

// onRenew: the held grant ends later; a renewal of a grant already handed
// back is ignored (the release crossed it).
func (c *client) onRenew(seq uint64, until time.Time) {
	if c.holding && c.seq == seq && !c.revoked {
		c.until = until
	}
}

func (c *client) onRevoke(seq uint64) {
	if c.holding && c.seq == seq {
		c.revoked = true
		c.checkIdle()
	}
}

// armIdle schedules the gate's idle check: a holder with nothing outstanding
// and no launch for w.idle hands the GPU back (no more work).
func (c *client) armIdle() {
	c.w.after(c.w.idle, c.checkIdle)
}

func (c *client) checkIdle() {
	if !c.holding || c.inLaunch || c.inflight > 0 {
		return
	}
	if c.revoked || c.w.now.Sub(c.lastUse) >= c.w.idle {
		c.release(false)
		return
	}
	c.w.at(c.lastUse.Add(c.w.idle), c.checkIdle)
}

func (c *client) kernelDone() {
	c.inflight--
	c.lastUse = c.w.now
	if len(c.onSlot) > 0 {
		f := c.onSlot[0]
		c.onSlot = c.onSlot[1:]
		f()
	}
	if c.inflight == 0 {
		run := c.onDrained
		c.onDrained = nil
		for _, f := range run {
			f()
		}
		c.armIdle()
	}
}
