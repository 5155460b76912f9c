package policy

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestCeilingSequences(t *testing.T) {
	capped := func(m float64) []tenantSpec {
		return []tenantSpec{{1, Params{ShareMax: m}}, {2, Params{}}, {3, Params{}}}
	}
	tests := []struct {
		name    string
		tenants []tenantSpec
		steps   []step
	}{
		{"alone: at most share.max of each period, then the GPU idles", capped(0.25), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{10 * ms, "more", 1, []string{"grant 1 10ms/10ms"}},
			{20 * ms, "more", 1, []string{"grant 1 5ms/5ms"}}, // 5 ms of 25 left
			{25 * ms, "more", 1, nil},
			{25 * ms, "next", 0, []string{"at 100ms"}},
			{60 * ms, "tick", 0, nil},
			{100 * ms, "tick", 0, []string{"grant 1 10ms/10ms"}},
		}},
		{"time held past the budget is taken off the next window", capped(0.25), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{10 * ms, "more", 1, []string{"grant 1 10ms/10ms"}},
			{20 * ms, "more", 1, []string{"grant 1 5ms/5ms"}},
			{28 * ms, "more", 1, nil},                          // 3 ms over
			{100 * ms, "tick", 0, []string{"grant 1 7ms/7ms"}}, // the slice repays the 3 ms of debt too
			{107 * ms, "more", 1, []string{"grant 1 10ms/10ms"}},
			{117 * ms, "more", 1, []string{"grant 1 5ms/5ms"}}, // 25 - 3 - 7 - 10
			{122 * ms, "more", 1, nil},
			{122 * ms, "next", 0, []string{"at 200ms"}},
		}},
		{"an overdraft of several windows keeps it off for as many", capped(0.1), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{35 * ms, "more", 1, nil}, // held 35 ms: 25 over (10 ms a window)
			{35 * ms, "next", 0, []string{"at 300ms"}},
			{300 * ms, "tick", 0, []string{"grant 1 5ms/5ms"}},
		}},
		{"unused budget is not carried over", capped(0.1), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{1 * ms, "rel", 1, nil},
			{150 * ms, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{160 * ms, "more", 1, nil},
			{160 * ms, "next", 0, []string{"at 200ms"}},
		}},
		{"banked time is cut to the budget", capped(0.15), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{2 * ms, "rel", 1, nil},                           // banks 8 ms; 13 ms of budget left
			{5 * ms, "acq", 1, []string{"grant 1 10ms/13ms"}}, // 18 ms with the bank
			{18 * ms, "more", 1, nil},
			{100 * ms, "tick", 0, []string{"grant 1 10ms/15ms"}},
		}},
		{"others take the GPU while a capped tenant is held back", capped(0.2), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}}, {0, "acq", 2, nil},
			{10 * ms, "more", 1, []string{"grant 2 10ms/10ms"}},
			{20 * ms, "more", 2, []string{"grant 1 10ms/10ms"}},
			{30 * ms, "more", 1, []string{"grant 2 10ms/10ms"}},
			{40 * ms, "more", 2, []string{"grant 2 10ms/10ms"}}, // 1 held back, banks nothing
			{90 * ms, "more", 2, []string{"grant 2 10ms/10ms"}},
			{100 * ms, "more", 2, []string{"grant 1 10ms/10ms"}},
		}},
		{"a held-back online tenant does not preempt", []tenantSpec{{1, Params{Priority: High, ShareMax: 0.3}}, {2, Params{}}, {3, Params{}}}, []step{
			{0, "acq", 2, []string{"grant 2 10ms/10ms"}},
			{10 * ms, "more", 2, []string{"grant 2 10ms/10ms"}}, // 1 and 3 bank
			{12 * ms, "acq", 1, []string{"revoke 2"}},
			{13 * ms, "more", 2, []string{"grant 1 20ms/30ms!"}}, // 40 ms with the bank, cut to the 30 ms budget
			{43 * ms, "more", 1, []string{"grant 2 10ms/17ms"}},
			{45 * ms, "acq", 1, nil},
			{60 * ms, "more", 2, []string{"grant 2 10ms/10ms"}},
			{70 * ms, "more", 2, []string{"grant 2 10ms/10ms"}},
		}},
		{"share.max 100% is no ceiling", capped(1), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{150 * ms, "more", 1, []string{"grant 1 10ms/10ms"}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, testConfig(), tc.tenants, tc.steps) })
	}
}

// TestCeilingUpdate: a changed ceiling applies at once (what the tenant held
// in the window counts against it); none lets the tenant go at once.
func TestCeilingUpdate(t *testing.T) {
	s := runSteps(t, testConfig(), []tenantSpec{{1, Params{ShareMax: 0.5}}}, []step{
		{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
		{10 * ms, "more", 1, []string{"grant 1 10ms/10ms"}}, // 30 ms left after this one
	})
	if err := s.Update(1, Params{ShareMax: 0.25}); err != nil {
		t.Fatal(err)
	}
	acts, _ := s.Release(1, 2, t0.Add(20*ms), true) // 25 - 20: 5 ms left
	if got := strings.Join(render(acts), ","); got != "grant 1 5ms/5ms" {
		t.Fatalf("after lowering: %q", got)
	}
	if acts, _ = s.Release(1, 3, t0.Add(25*ms), true); acts != nil {
		t.Fatalf("granted past the lower ceiling: %q", render(acts))
	}
	if err := s.Update(1, Params{ShareMax: 0.3}); err != nil {
		t.Fatal(err)
	}
	if acts = s.Tick(t0.Add(26 * ms)); strings.Join(render(acts), ",") != "grant 1 5ms/5ms" {
		t.Fatalf("after raising: %q", render(acts))
	}
	if acts, _ = s.Release(1, 4, t0.Add(31*ms), true); acts != nil {
		t.Fatalf("granted past the raised ceiling: %q", render(acts))
	}
	if err := s.Update(1, Params{}); err != nil {
		t.Fatal(err)
	}
	if acts = s.Tick(t0.Add(32 * ms)); strings.Join(render(acts), ",") != "grant 1 10ms/10ms" {
		t.Fatalf("without a ceiling: %q", render(acts))
	}
}

func TestCeilingInvalid(t *testing.T) {
	s, _ := New(testConfig())
	if err := s.Add(1, Params{ShareMax: 0.4}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []float64{-0.1, 0.001, 1.01, math.NaN(), math.Inf(1)} {
		if err := s.Update(1, Params{ShareMax: m}); err == nil || !strings.Contains(err.Error(), "share ceiling") {
			t.Errorf("share.max %v: error %v", m, err)
		}
		if err := s.Add(2, Params{ShareMax: m}); err == nil {
			t.Errorf("share.max %v: added", m)
		}
	}
	if st := s.Stats(t0); len(st) != 1 || st[0].Params.ShareMax != 0.4 {
		t.Fatalf("bad input changed state: %+v", st)
	}
}

// TestSimCeiling: on the simulated GPU, a busy tenant with share.max 40% runs
// 40% +-3 pp of every 1 s window alone (the GPU idles the rest), and beside a
// busy uncapped tenant with the same slice (fair share 50%) it runs 40% and
// the other gets the rest: the GPU stays busy.
func TestSimCeiling(t *testing.T) {
	for _, others := range []int{0, 1} {
		w := newWorld(DefaultConfig(), time.Second)
		w.addClient(Params{ShareMax: 0.4}).busyLoop(300 * us)
		for range others {
			w.addClient(Params{}).busyLoop(500 * us)
		}
		const windows = 10
		w.run(t0.Add(windows * time.Second))
		worst, minBusy := 0.0, 1.0
		for win := 1; win < windows; win++ {
			got := w.busy[0][win].Seconds() / w.window.Seconds()
			worst = max(worst, math.Abs(got-0.4)*100)
			if math.Abs(got-0.4) > 0.03 {
				t.Errorf("%d others, window %d: capped tenant ran %.1f%%, want 40%% +-3", others, win, got*100)
			}
			busy := 0.0
			for id := range others + 1 {
				busy += w.busy[ID(id)][win].Seconds() / w.window.Seconds()
			}
			minBusy = min(minBusy, busy)
		}
		if others > 0 && minBusy < 0.9 {
			t.Errorf("beside the capped tenant the GPU was busy %.1f%%, want >= 90%%", minBusy*100)
		}
		t.Logf("share.max 40%% with %d busy tenants beside: worst error %.2f pp over 1 s windows, GPU busy >= %.1f%%",
			others, worst, minBusy*100)
	}
}

// TestCeilingRandom: random acquires, early and late releases and ticks of
// three tenants (capped 30%, capped 15% online, uncapped), 20 s on the fake
// clock: in every window a capped tenant held the GPU at most its budget plus
// the grace a late hand-over may take, and over the whole run at most
// share.max x (run + one period) plus the grace.
func TestCeilingRandom(t *testing.T) {
	cfg := testConfig()
	params := []Params{{ShareMax: 0.3}, {ShareMax: 0.15, Priority: High}, {}}
	for seed := range uint64(20) {
		s, spans := randomRun(t, cfg, params, seed, 20*time.Second)
		var total [3]time.Duration
		for id := range params {
			for _, sp := range spans[ID(id)] {
				total[id] += sp[1].Sub(sp[0])
			}
		}
		for id, p := range params[:2] {
			c := s.byID[ID(id)].ceil
			q := cfg.quota(p.ShareMax)
			held := map[int64]time.Duration{} // aligned on the scheduler's windows
			for _, sp := range spans[ID(id)] {
				for from := sp[0]; from.Before(sp[1]); {
					k := int64(from.Sub(c.start).Truncate(cfg.Period) / cfg.Period)
					if from.Before(c.start) && from.Sub(c.start)%cfg.Period != 0 {
						k--
					}
					to := c.start.Add(time.Duration(k+1) * cfg.Period)
					if sp[1].Before(to) {
						to = sp[1]
					}
					held[k] += to.Sub(from)
					from = to
				}
			}
			for k, h := range held {
				if h > q+cfg.Grace {
					t.Fatalf("seed %d tenant %d window %d: held %v, budget %v + grace %v", seed, id, k, h, q, cfg.Grace)
				}
			}
			run := spans[ID(id)][len(spans[ID(id)])-1][1].Sub(spans[ID(id)][0][0])
			if bound := time.Duration(p.ShareMax*float64(run+cfg.Period)) + cfg.Grace; total[id] > bound {
				t.Fatalf("seed %d tenant %d: held %v in %v, bound %v", seed, id, total[id], run, bound)
			}
		}
		if total[2] == 0 || total[0] == 0 || total[1] == 0 {
			t.Fatalf("seed %d: held %v", seed, total)
		}
	}
}

// randomRun drives a scheduler with random calls for d and returns the spans
// each tenant held the GPU.
func randomRun(t *testing.T, cfg Config, params []Params, seed uint64, d time.Duration) (*Scheduler, map[ID][][2]time.Time) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	s, _ := New(cfg)
	for i, p := range params {
		if err := s.Add(ID(i), p); err != nil {
			t.Fatal(err)
		}
	}
	spans := map[ID][][2]time.Time{}
	now, end := t0, t0.Add(d)
	for now.Before(end) {
		now = now.Add(time.Duration(rng.Int64N(int64(3 * ms))))
		if at, ok := s.NextDeadline(); ok && at.Before(now) {
			now = at
		}
		g, holding := s.Holder()
		switch r := rng.IntN(4); {
		case r == 0:
			if _, err := s.Acquire(ID(rng.IntN(len(params))), now); err != nil {
				t.Fatal(err)
			}
		case r == 1 && holding:
			spans[g.Tenant] = append(spans[g.Tenant], [2]time.Time{g.Start, now})
			if _, err := s.Release(g.Tenant, g.Seq, now, rng.IntN(3) > 0); err != nil {
				t.Fatal(err)
			}
		default:
			for _, a := range s.Tick(now) {
				if a.Kind == ActExpire {
					spans[a.Tenant] = append(spans[a.Tenant], [2]time.Time{a.Grant.Start, now})
				}
			}
		}
	}
	return s, spans
}

// TestCeilingBudgetCarriedOver: a capped tenant removed while holding and
// added back (a group whose last process left and came back) gets the budget
// it had left, not a fresh one.
func TestCeilingBudgetCarriedOver(t *testing.T) {
	s := runSteps(t, testConfig(), []tenantSpec{{1, Params{ShareMax: 0.25}}, {3, Params{}}}, []step{
		{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
		{10 * ms, "more", 1, []string{"grant 1 10ms/10ms"}},
	})
	now := t0.Add(15 * ms)
	b, ok := s.Budget(1, now)
	if !ok || b.Used != 15*ms || !b.Start.Equal(t0) || !b.Until.Equal(t0.Add(100*ms)) {
		t.Fatalf("budget %+v %v", b, ok)
	}
	if _, ok := s.Budget(3, now); ok {
		t.Fatal("a tenant without a ceiling has a budget")
	}
	s.Remove(1, now)
	if err := s.Add(2, Params{ShareMax: 0.25}); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(2, b); err != nil {
		t.Fatal(err)
	}
	acts, _ := s.Acquire(2, now)
	if got := strings.Join(render(acts), ","); got != "grant 2 10ms/10ms" {
		t.Fatalf("back: %q", got)
	}
	if acts, _ = s.Release(2, acts[0].Grant.Seq, t0.Add(25*ms), true); acts != nil {
		t.Fatalf("a fresh budget after coming back: %q", render(acts))
	}
	if at, ok := s.NextDeadline(); !ok || !at.Equal(t0.Add(100*ms)) {
		t.Fatalf("next %v %v", at, ok)
	}
	if err := s.Restore(9, b); err == nil {
		t.Fatal("restored an unknown tenant")
	}
}
