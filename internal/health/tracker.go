package health

import (
	"fmt"
	"time"
)

// Cause says why a GPU is unhealthy.
type Cause string

// Causes, in the order a GPU's reason names them.
const (
	// CauseXID: a critical XID; the GPU stays unhealthy until it is reset
	// (a reboot, or an operator clearing the agent's XID record: XIDs and
	// Restore carry it across agent restarts).
	CauseXID Cause = "xid"
	// CauseQuery: NVML fails to measure the GPU; healthy again once a
	// query succeeds.
	CauseQuery Cause = "query"
	// CauseEvents: NVML could not register the GPU for XID events, or
	// waiting for events failed; the latter clears with the next wait.
	CauseEvents Cause = "events"
)

// Status is one GPU's health.
type Status struct {
	UUID    string
	Healthy bool
	Cause   Cause  // the first cause while unhealthy
	Reason  string // why, for people; empty when healthy
	// XID is the first critical XID while Cause is CauseXID, else 0.
	XID uint64
}

// Lost tells whether the GPU is gone from the node, not merely unfit for new
// work: it fell off the bus (XID 79), so the work on it is lost too.
func (s Status) Lost() bool { return s.Cause == CauseXID && s.XID == 79 }

// Change is a GPU whose health or reason changed.
type Change = Status

type gpuState struct {
	xid, query, register, wait string // reasons; empty: not this cause
	xidNum                     uint64 // the XID behind xid
}

func (g *gpuState) status(uuid string) Status {
	for _, c := range []struct {
		cause  Cause
		reason string
	}{{CauseXID, g.xid}, {CauseQuery, g.query}, {CauseEvents, g.register}, {CauseEvents, g.wait}} {
		if c.reason != "" {
			st := Status{UUID: uuid, Cause: c.cause, Reason: c.reason}
			if c.cause == CauseXID {
				st.XID = g.xidNum
			}
			return st
		}
	}
	return Status{UUID: uuid, Healthy: true}
}

// Tracker holds the health of a node's GPUs. Not safe for concurrent use.
type Tracker struct {
	order []string
	gpus  map[string]*gpuState
	skip  []uint64
}

// NewTracker tracks the GPUs with these UUIDs, all healthy; skip lists XIDs
// that are not critical beyond the application ones.
func NewTracker(uuids []string, skip []uint64) *Tracker {
	t := &Tracker{gpus: make(map[string]*gpuState, len(uuids)), skip: append([]uint64(nil), skip...)}
	for _, u := range uuids {
		if _, dup := t.gpus[u]; !dup {
			t.order = append(t.order, u)
			t.gpus[u] = &gpuState{}
		}
	}
	return t
}

// Status returns one GPU's health (an unknown UUID is unhealthy).
func (t *Tracker) Status(uuid string) Status {
	g, ok := t.gpus[uuid]
	if !ok {
		return Status{UUID: uuid, Cause: CauseQuery, Reason: "not a GPU of this node"}
	}
	return g.status(uuid)
}

// All returns every GPU's health in the order given to NewTracker.
func (t *Tracker) All() []Status {
	out := make([]Status, 0, len(t.order))
	for _, u := range t.order {
		out = append(out, t.gpus[u].status(u))
	}
	return out
}

// update applies set to the GPUs named (all when uuids is empty) and returns
// those whose status changed.
func (t *Tracker) update(uuids []string, set func(*gpuState)) []Change {
	if len(uuids) == 0 {
		uuids = t.order
	}
	var out []Change
	for _, u := range uuids {
		g, ok := t.gpus[u]
		if !ok {
			continue
		}
		before := g.status(u)
		set(g)
		if after := g.status(u); after != before {
			out = append(out, after)
		}
	}
	return out
}

// XID records an XID event on the GPU uuid at time at; "" means NVML could
// not say which GPU, and a critical XID then marks every GPU, as NVIDIA's
// device plugin does. Application and skipped XIDs change nothing.
func (t *Tracker) XID(uuid string, xid uint64, at time.Time) []Change {
	if !Critical(xid, t.skip) {
		return nil
	}
	reason := fmt.Sprintf("%s at %s", Describe(xid), at.UTC().Format(time.RFC3339))
	var uuids []string
	if uuid != "" {
		if _, ok := t.gpus[uuid]; !ok {
			return nil // not one of ours
		}
		uuids = []string{uuid}
	} else {
		reason += " on a GPU NVML could not name"
	}
	return t.update(uuids, func(g *gpuState) {
		if g.xid == "" { // the first critical XID is the one to report
			g.xid, g.xidNum = reason, xid
		}
	})
}

// Query records the outcome of measuring the GPU (nil: it answered).
func (t *Tracker) Query(uuid string, err error) []Change {
	reason := ""
	if err != nil {
		reason = "NVML query failed: " + err.Error()
	}
	return t.update([]string{uuid}, func(g *gpuState) { g.query = reason })
}

// Register records the outcome of registering the GPU for XID events (nil:
// registered, or the GPU does not support them and is watched by queries).
func (t *Tracker) Register(uuid string, err error) []Change {
	reason := ""
	if err != nil {
		reason = "NVML event registration failed: " + err.Error()
	}
	return t.update([]string{uuid}, func(g *gpuState) { g.register = reason })
}

// Wait records the outcome of waiting for events (nil: an event or the
// timeout); a failure concerns every GPU, as NVML cannot say whose.
func (t *Tracker) Wait(err error) []Change {
	reason := ""
	if err != nil {
		reason = "waiting for NVML events failed: " + err.Error()
	}
	return t.update(nil, func(g *gpuState) { g.wait = reason })
}

// XIDs returns the GPUs unhealthy by a critical XID (Cause CauseXID, the
// XID and its reason), in the order given to NewTracker: what an agent
// restart must not forget.
func (t *Tracker) XIDs() []Status {
	var out []Status
	for _, u := range t.order {
		if g := t.gpus[u]; g.xid != "" {
			out = append(out, Status{UUID: u, Cause: CauseXID, Reason: g.xid, XID: g.xidNum})
		}
	}
	return out
}

// Restore marks a GPU unhealthy by an XID seen before (by an earlier run
// of the agent), as XID would have; an unknown GPU, an XID not critical now
// or a GPU with an XID already changes nothing.
func (t *Tracker) Restore(uuid string, xid uint64, reason string) []Change {
	if _, ok := t.gpus[uuid]; !ok || !Critical(xid, t.skip) {
		return nil
	}
	if reason == "" {
		reason = Describe(xid)
	}
	return t.update([]string{uuid}, func(g *gpuState) {
		if g.xid == "" {
			g.xid, g.xidNum = reason, xid
		}
	})
}
