package elastic

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// BurstyResult is one run of Bursty.
type BurstyResult struct {
	InUse  float64 // mean device memory in use, a fraction of the card
	Served float64 // bytes held over bytes wanted, summed over steps
	Model  *Model  // the final state (its outcome counters)
}

// Bursty runs tenants with bursty demand on a card of total bytes, each
// guaranteed total/tenants (what the scheduler books): capped there (static),
// or with the given ceiling and spill to host (elastic). Every 10 ms step a
// tenant wants its base (30-70 % of its guarantee) plus, during a burst (3 %
// chance to start per step, 20-80 steps long), 1-2.5 guarantees more; it
// allocates towards that in 512 MiB pieces (at most 8 per step) and frees its
// latest pieces past it. Deterministic for a seed.
func Bursty(seed uint64, tenants int, total, ceiling uint64, steps int, elastic bool) BurstyResult {
	const piece = 512 << 20
	r := rand.New(rand.NewPCG(seed, 42))
	g := total / uint64(tenants)
	set := map[string]Settings{}
	names := make([]string, tenants)
	base := make([]uint64, tenants)
	burst := make([]uint64, tenants)
	left := make([]int, tenants)
	for i := range names {
		names[i] = fmt.Sprint("tenant-", i)
		s := Settings{Min: g, Max: g}
		if elastic {
			s = Settings{Min: g, Max: ceiling, Spill: true}
		}
		set[names[i]] = s
		base[i] = g * uint64(30+r.IntN(41)) / 100
	}
	m := NewModel(total, set)
	var inUse, held, wanted float64
	for range steps {
		m.Advance(10 * time.Millisecond)
		for i, n := range names {
			if left[i] == 0 && r.IntN(100) < 3 {
				left[i] = 20 + r.IntN(61)
				burst[i] = g * uint64(100+r.IntN(151)) / 100
			}
			if left[i] > 0 {
				left[i]--
			} else {
				burst[i] = 0
			}
			want := base[i] + burst[i]
			for k := 0; k < 8 && m.Usage(n).Used+piece <= want; k++ {
				if !m.Allocate(n, piece) {
					break
				}
			}
			for m.Usage(n).Used > want && m.Allocations(n) > 0 {
				m.Free(n, m.Allocations(n)-1)
			}
			held += float64(m.Usage(n).Used)
			wanted += float64(want)
		}
		inUse += float64(m.Device()) / float64(total)
	}
	return BurstyResult{InUse: inUse / float64(steps), Served: held / wanted, Model: m}
}
