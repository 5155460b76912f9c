package policy

import (
	"slices"
	"time"
)

// overruns keeps how long past a revoke (the end of its grant, or an online
// tenant's preemption) a tenant handed the GPU over: the work it had left
// queued on the GPU when told to stop, and its hand-over round trip. An
// expired grant counts the grace. The last overrunKeep are kept.
type overruns struct {
	n    uint64
	max  time.Duration
	last [overrunKeep]time.Duration
}

const overrunKeep = 256

func (o *overruns) add(d time.Duration) {
	d = max(d, 0)
	o.last[o.n%overrunKeep] = d
	o.n++
	o.max = max(o.max, d)
}

// p99 of the kept values (0 with none).
func (o *overruns) p99() time.Duration {
	n := min(o.n, overrunKeep)
	if n == 0 {
		return 0
	}
	v := slices.Clone(o.last[:n])
	slices.Sort(v)
	return v[(n*99+99)/100-1]
}
