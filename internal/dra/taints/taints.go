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
