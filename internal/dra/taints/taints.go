// Package taints decides the device taints of the gpuslice.io DRA driver's
// GPUs (pure logic, a caller-supplied clock): an XID-unhealthy GPU is tainted
// NoSchedule, and NoExecute where the GPU is lost; a GPU whose measured
// utilization stays at or above a threshold is tainted NoSchedule until it
// stays below a lower one (hysteresis), so the stock scheduler skips it.
package taints

import (
	"time"

	resourceapi "k8s.io/api/resource/v1"
)

// Taint keys.
const (
	KeyUnhealthy = "gpuslice.io/unhealthy"
	KeyBusy      = "gpuslice.io/busy"
)

// Busy tracks one GPU's utilization against the thresholds.
type Busy struct {
	// Above taints once utilization (percent) has stayed at or above it
	// for Hold; Below (< Above) untaints once it has stayed below it for Hold.
	Above, Below float64
	Hold         time.Duration

	tainted bool
	since   time.Time // start of the current run across the threshold; zero: none
}

// Observe records a measurement taken at now and reports whether the GPU is
// tainted busy.
func (b *Busy) Observe(util float64, now time.Time) bool {
	crossing := !b.tainted && util >= b.Above || b.tainted && util < b.Below
	switch {
	case !crossing:
		b.since = time.Time{}
	case b.since.IsZero():
		b.since = now
	}
	if crossing && now.Sub(b.since) >= b.Hold {
		b.tainted, b.since = !b.tainted, time.Time{}
	}
	return b.tainted
}

// For returns a GPU's taints: unhealthy (lost: NoExecute, else NoSchedule)
// and busy (NoSchedule).
func For(healthy, lost, busy bool, reason string) []resourceapi.DeviceTaint {
	var out []resourceapi.DeviceTaint
	switch {
	case lost:
		out = append(out, resourceapi.DeviceTaint{Key: KeyUnhealthy, Value: reason, Effect: resourceapi.DeviceTaintEffectNoExecute})
	case !healthy:
		out = append(out, resourceapi.DeviceTaint{Key: KeyUnhealthy, Value: reason, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	if busy {
		out = append(out, resourceapi.DeviceTaint{Key: KeyBusy, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	return out
}

// Health is what the node knows of one GPU's health at a moment.
type Health struct {
	Healthy, Lost bool
	// Reason is the taint's value: a label value naming the cause
	// ("xid-79", "query"); it is cut to 63 characters.
	Reason string
}

// Node decides the taints of a node's GPUs from their health and measured
// utilization. Not safe for concurrent use.
type Node struct {
	busy []Busy // nil: the busy taint is off
	last [][]resourceapi.DeviceTaint
}

// NewNode tracks n GPUs; above <= 0 turns the busy taint off.
func NewNode(n int, above, below float64, hold time.Duration) *Node {
	nd := &Node{last: make([][]resourceapi.DeviceTaint, n)}
	if above > 0 {
		nd.busy = make([]Busy, n)
		for i := range nd.busy {
			nd.busy[i] = Busy{Above: above, Below: below, Hold: hold}
		}
	}
	return nd
}

// BusyOn tells whether utilization matters (the busy taint is on).
func (n *Node) BusyOn() bool { return n.busy != nil }

// Update takes each GPU's health and utilization (percent; a negative value:
// not measured this time, the GPU keeps its busy state) at now, and returns
// every GPU's taints and whether any changed since the last Update.
func (n *Node) Update(health []Health, util []float64, now time.Time) ([][]resourceapi.DeviceTaint, bool) {
	changed := false
	for i, h := range health {
		busy := false
		if n.busy != nil {
			if i < len(util) && util[i] >= 0 {
				n.busy[i].Observe(util[i], now)
			}
			busy = n.busy[i].tainted
		}
		reason := h.Reason
		if len(reason) > 63 {
			reason = reason[:63]
		}
		t := For(h.Healthy, h.Lost, busy, reason)
		if !equal(t, n.last[i]) {
			n.last[i], changed = t, true
		}
	}
	return n.last, changed
}

func equal(a, b []resourceapi.DeviceTaint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || a[i].Value != b[i].Value || a[i].Effect != b[i].Effect {
			return false
		}
	}
	return true
}
