package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

const (
	us         = time.Microsecond
	launchCost = 5 * us  // CPU time of one launch call
	syncCPU    = 20 * us // CPU time between a sync returning and the next launch
)

// busyLoop launches kernels of length k back to back, never synchronizing.
func (c *client) busyLoop(k time.Duration) {
	var loop func()
	loop = func() { c.w.after(launchCost, func() { c.launch(k, loop) }) }
	loop()
}

// syncLoop launches one kernel, waits for it, and repeats.
func (c *client) syncLoop(k time.Duration) {
	var loop func()
	loop = func() {
		c.launch(k, func() { c.sync(func() { c.w.after(syncCPU, loop) }) })
	}
	c.w.after(syncCPU, loop)
}

// requests is a latency-sensitive tenant: requests of n kernels of length k
// arrive every gap (plus jitter); latency is arrival to completion.
type requests struct {
	c      *client
	k      time.Duration
	n      int
	gap    time.Duration
	jitter time.Duration
	rng    *rand.Rand
	lat    []time.Duration
}

func (r *requests) start(first time.Time) { r.c.w.at(first, func() { r.serve(first) }) }

func (r *requests) serve(arrival time.Time) {
	w := r.c.w
	var launchN func(i int)
	launchN = func(i int) {
		if i == r.n {
			r.c.sync(func() {
				r.lat = append(r.lat, w.now.Sub(arrival))
				next := arrival.Add(r.gap + time.Duration(r.rng.Int64N(int64(r.jitter))))
				at := next
				if at.Before(w.now) {
					at = w.now
				}
				w.at(at, func() { r.serve(next) })
			})
			return
		}
		w.after(launchCost, func() { r.c.launch(r.k, func() { launchN(i + 1) }) })
	}
	launchN(0)
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// TestSimShares: every tenant busy (half of them synchronizing after every
// kernel), different slices; achieved GPU shares match configured ones within
// 3 percentage points in every 1 s window, and the GPU stays at least 90% busy.
func TestSimShares(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		t.Run(fmt.Sprintf("%d tenants", n), func(t *testing.T) {
			w := newWorld(DefaultConfig(), time.Second)
			var total time.Duration
			slicesOf := make([]time.Duration, n)
			for i := range n {
				slicesOf[i] = time.Duration(i%3+1) * 5 * time.Millisecond
				total += slicesOf[i]
				c := w.addClient(Params{Slice: slicesOf[i]})
				if i%2 == 0 {
					c.busyLoop(time.Duration(200+100*i) * us)
				} else {
					c.syncLoop(time.Duration(1000+50*i) * us)
				}
			}
			const windows = 10
			w.run(t0.Add(windows * time.Second))
			worst, minBusy := 0.0, 1.0
			for win := 1; win < windows; win++ { // window 0 includes start-up
				var busy time.Duration
				for i := range n {
					got := w.busy[ID(i)][win].Seconds() / w.window.Seconds()
					want := slicesOf[i].Seconds() / total.Seconds()
					busy += w.busy[ID(i)][win]
					worst = max(worst, math.Abs(got-want)*100)
					if math.Abs(got-want) > 0.03 {
						t.Errorf("window %d tenant %d: share %.1f%%, want %.1f%% ± 3", win, i, got*100, want*100)
					}
				}
				minBusy = min(minBusy, busy.Seconds()/w.window.Seconds())
			}
			if minBusy < 0.90 {
				t.Errorf("GPU busy %.1f%% in the worst window, want >= 90%%", minBusy*100)
			}
			t.Logf("%d tenants: worst share error %.2f pp over 1 s windows, GPU busy >= %.1f%%", n, worst, minBusy*100)
		})
	}
}

// burstScenario runs one online tenant whose requests need 3x its slice, with
// offline busy tenants beside it, and returns its request latencies.
// The offline tenants have the default 10 ms slices; the online one onSlice
// (0: the high-priority default, 20 ms).
func burstScenario(burst bool, offline int, onSlice time.Duration) []time.Duration {
	cfg := DefaultConfig()
	cfg.Burst = burst
	w := newWorld(cfg, time.Second)
	on := Params{Priority: High, Slice: onSlice}
	online := w.addClient(on)
	for i := range offline {
		w.addClient(Params{}).busyLoop(time.Duration(400+50*i) * us)
	}
	slice := cfg.SliceOf(on)
	const k = 500 * us
	r := &requests{c: online, k: k, n: int(3 * slice / k), gap: 400 * time.Millisecond,
		jitter: 200 * time.Millisecond, rng: rand.New(rand.NewPCG(1, 2))}
	r.start(t0.Add(300 * time.Millisecond))
	w.run(t0.Add(120 * time.Second))
	return r.lat
}

// TestSimBurstBuffer: with burst buffers an online tenant's 3x-slice requests
// finish in one go ahead of 7 busy offline tenants: p99 at least 5x lower than
// the same scheduler without buffers (equal slices; at least 3x with the online
// tenant's default double slice, which needs fewer turns without buffers), and
// within 1.5x of running alone.
func TestSimBurstBuffer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		onSlice time.Duration
		gain    float64
	}{{"equal 10ms slices", 10 * time.Millisecond, 5}, {"default slices", 0, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			with := burstScenario(true, 7, tc.onSlice)
			without := burstScenario(false, 7, tc.onSlice)
			alone := burstScenario(true, 0, tc.onSlice)
			if len(with) < 200 || len(without) < 100 {
				t.Fatalf("too few requests served: %d with, %d without", len(with), len(without))
			}
			p := func(d []time.Duration) (time.Duration, time.Duration) {
				return percentile(d, 0.5).Round(10 * us), percentile(d, 0.99).Round(10 * us)
			}
			w50, w99 := p(with)
			o50, o99 := p(without)
			a50, a99 := p(alone)
			t.Logf("%s: request p50/p99 with burst buffers %v/%v, without %v/%v, alone %v/%v: p99 %.1fx lower, %.2fx alone",
				tc.name, w50, w99, o50, o99, a50, a99, float64(o99)/float64(w99), float64(w99)/float64(a99))
			if float64(o99) < tc.gain*float64(w99) {
				t.Errorf("p99 with buffers %v is not %vx lower than without (%v)", w99, tc.gain, o99)
			}
			if float64(w99) > 1.5*float64(a99) {
				t.Errorf("p99 with buffers %v is over 1.5x the p99 alone (%v)", w99, a99)
			}
		})
	}
}

// TestSimAlone: a lone busy tenant keeps the GPU busy without a hand-over per
// slice (its grant is renewed), and with renewal off hands over every slice.
func TestSimAlone(t *testing.T) {
	for _, renew := range []time.Duration{DefaultConfig().Renew, 0} {
		cfg := DefaultConfig()
		cfg.Renew = renew
		w := newWorld(cfg, time.Second)
		w.addClient(Params{}).busyLoop(50 * us)
		w.addClient(Params{}) // registered, no work: banks
		w.run(t0.Add(2 * time.Second))
		busy := w.busy[0][1].Seconds() / w.window.Seconds()
		t.Logf("renew %v: %d hand-overs in 2 s, GPU busy %.2f%% in the second window", renew, w.releases, busy*100)
		switch {
		case renew > 0 && w.releases != 0:
			t.Errorf("renewal on: %d hand-overs, want 0", w.releases)
		case renew == 0 && w.releases < 150:
			t.Errorf("renewal off: %d hand-overs, want one per 10 ms slice", w.releases)
		}
	}
}
