package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// t0 is the fake clock's origin; steps give offsets from it.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

const ms = time.Millisecond

type step struct {
	at   time.Duration
	op   string // acq, rel (no more work), more (release, still has work), tick, rm, next (deadline)
	id   ID
	want []string
}

type tenantSpec struct {
	id ID
	p  Params
}

// render prints actions compactly: "grant 1 10ms/14ms" is a grant whose own slice
// is 10ms and whose total length (with banked time) is 14ms; a "!" marks preemption.
func render(acts []Action) []string {
	var out []string
	for _, a := range acts {
		switch {
		case a.Kind == ActRenew && !a.Grant.Alone:
			out = append(out, fmt.Sprintf("shared %d", a.Tenant))
		case a.Kind == ActGrant, a.Kind == ActRenew:
			g := a.Grant
			s := fmt.Sprintf("%v %d %v/%v", a.Kind, a.Tenant, g.SliceEnd.Sub(g.Start), g.End.Sub(g.Start))
			if g.Preempt {
				s += "!"
			}
			out = append(out, s)
		case a.Kind == ActExpire && a.Again:
			out = append(out, fmt.Sprintf("expire %d again", a.Tenant))
		default:
			out = append(out, fmt.Sprintf("%v %d", a.Kind, a.Tenant))
		}
	}
	return out
}

func testConfig() Config {
	c := DefaultConfig()
	c.DefaultSlice = 10 * ms
	c.Grace = 2 * ms
	c.PreemptMin = 1 * ms
	c.BankMaxAge = 100 * ms
	c.BankMaxSlices = 3
	return c
}

func runSteps(t *testing.T, cfg Config, tenants []tenantSpec, steps []step) *Scheduler {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range tenants {
		if err := s.Add(ts.id, ts.p); err != nil {
			t.Fatal(err)
		}
	}
	for i, st := range steps {
		now := t0.Add(st.at)
		var acts []Action
		switch st.op {
		case "acq":
			acts, err = s.Acquire(st.id, now)
		case "rel", "more":
			g, _ := s.Holder()
			acts, err = s.Release(st.id, g.Seq, now, st.op == "more")
		case "tick":
			acts = s.Tick(now)
		case "rm":
			acts = s.Remove(st.id, now)
		case "next": // NextDeadline, as an offset from t0
			if at, ok := s.NextDeadline(); ok {
				acts = nil
				if got, want := "at "+at.Sub(t0).String(), st.want; len(want) != 1 || got != want[0] {
					t.Fatalf("step %d: next deadline %s, want %q", i, got, want)
				}
				continue
			}
		default:
			t.Fatalf("step %d: unknown op %q", i, st.op)
		}
		if err != nil {
			t.Fatalf("step %d (%s %d at %v): %v", i, st.op, st.id, st.at, err)
		}
		if got := render(acts); !slices.Equal(got, st.want) {
			t.Fatalf("step %d (%s %d at %v): got %q, want %q", i, st.op, st.id, st.at, got, st.want)
		}
	}
	return s
}

// sequence is one scenario: tenants added to a scheduler with cfg, then the
// steps, each with the actions it must give.
type sequence struct {
	name    string
	cfg     Config
	tenants []tenantSpec
	steps   []step
}

func runSequences(t *testing.T, seqs []sequence) {
	for _, tc := range seqs {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, tc.cfg, tc.tenants, tc.steps) })
	}
}

// three is three tenants with default parameters.
func three() []tenantSpec { return []tenantSpec{{1, Params{}}, {2, Params{}}, {3, Params{}}} }

// TestSchedulerTurnsAndBank: turns go round the busy tenants; an idle or
// early-released turn is banked (capped in count and age) and a removed
// holder hands over at once.
func TestSchedulerTurnsAndBank(t *testing.T) {
	runSequences(t, []sequence{
		{"round robin among busy tenants", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{0, "acq", 2, []string{"shared 1"}}, {0, "acq", 3, nil},
			{10 * ms, "more", 1, []string{"grant 2 10ms/10ms"}},
			{20 * ms, "more", 2, []string{"grant 3 10ms/10ms"}},
			{30 * ms, "more", 3, []string{"grant 1 10ms/10ms"}},
		}},
		{"tenant without work banks its slice and the GPU moves on", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{0, "acq", 3, []string{"shared 1"}},
			{10 * ms, "more", 1, []string{"grant 3 10ms/10ms"}}, // 2 passed: banks 10ms
			{20 * ms, "more", 3, []string{"grant 1 10ms/10ms"}},
			{25 * ms, "acq", 2, nil},
			{30 * ms, "more", 1, []string{"grant 2 10ms/20ms"}}, // slice + 10ms banked
		}},
		{"early release banks the rest, expiring after max age", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{4 * ms, "rel", 1, nil}, // 6ms banked at 4ms
			{50 * ms, "acq", 1, []string{"grant 1 10ms/16ms"}},
			{51 * ms, "rel", 1, nil},                            // used 1ms: 6ms still banked (from 4ms) + 9ms (at 51ms)
			{104 * ms, "acq", 1, []string{"grant 1 10ms/19ms"}}, // the 6ms deposit has expired
		}},
		{"bank capped at max slices", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{10 * ms, "more", 1, []string{"grant 1 10ms/10ms"}}, // 2 and 3 bank 10ms
			{20 * ms, "more", 1, []string{"grant 1 10ms/10ms"}},
			{30 * ms, "more", 1, []string{"grant 1 10ms/10ms"}},
			{40 * ms, "more", 1, []string{"grant 1 10ms/10ms"}}, // 2 and 3 at cap 30ms
			{45 * ms, "acq", 2, []string{"shared 1"}},
			{50 * ms, "more", 1, []string{"grant 2 10ms/40ms"}},
		}},
		{"removing the holder grants the next at once", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}}, {0, "acq", 2, []string{"shared 1"}},
			{3 * ms, "rm", 1, []string{"grant 2 10ms/10ms"}},
			{13 * ms, "more", 2, []string{"grant 2 10ms/10ms"}},
		}},
	})
}

// TestSchedulerDebt: an overrun beyond the bank is debt, repaid by passing
// turns or a shorter slice; a grant's end revokes and its grace's end expires.
func TestSchedulerDebt(t *testing.T) {
	runSequences(t, []sequence{
		{"burst spends bank, overrun beyond it becomes debt", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{2 * ms, "rel", 1, nil},                           // banks 8ms
			{5 * ms, "acq", 1, []string{"grant 1 10ms/18ms"}}, // 2 and 3 passed: bank 10ms
			{5 * ms, "acq", 2, []string{"shared 1"}},
			{26 * ms, "more", 1, []string{"grant 2 10ms/20ms"}}, // used 21: 8 banked, 3 debt
			{36 * ms, "more", 2, []string{"grant 1 7ms/7ms"}},
		}},
		{"a tenant in debt passes its turns until it has repaid", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{0, "acq", 2, []string{"shared 1"}},
			{40 * ms, "more", 1, []string{"grant 2 10ms/10ms"}}, // 30ms debt
			{50 * ms, "more", 2, []string{"grant 2 10ms/10ms"}}, // 1 passes: 20ms debt
			{60 * ms, "more", 2, []string{"grant 2 10ms/10ms"}}, // 10ms
			{70 * ms, "more", 2, []string{"grant 2 10ms/10ms"}}, // repaid
			{80 * ms, "more", 2, []string{"grant 1 10ms/10ms"}},
		}},
		{"partial debt shortens the slice, never below the minimum", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{0, "acq", 2, []string{"shared 1"}},
			{19*ms + 950*time.Microsecond, "more", 1, []string{"grant 2 10ms/10ms"}}, // 9.95ms debt
			{29*ms + 950*time.Microsecond, "more", 2, []string{"grant 1 100µs/100µs"}},
		}},
		{"everyone waiting in debt: the GPU is still handed out", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{0, "acq", 2, []string{"shared 1"}},
			{40 * ms, "more", 1, []string{"grant 2 10ms/10ms"}}, // 1 owes 30ms
			{80 * ms, "rel", 2, []string{"grant 1 10ms/10ms"}},  // 2 owes 30ms and has no work
		}},
		{"grant end revokes, grace end expires and moves on", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{1 * ms, "acq", 2, []string{"shared 1"}},
			{9 * ms, "tick", 0, nil},
			{10 * ms, "tick", 0, []string{"revoke 1"}},
			{11 * ms, "tick", 0, nil},
			{12 * ms, "tick", 0, []string{"expire 1 again", "grant 2 10ms/10ms"}}, // 1 owes 2ms, keeps its place
			{13 * ms, "rel", 1, nil},                                              // late release of the void grant: no more work
			{22 * ms, "more", 2, []string{"grant 2 10ms/10ms"}},                   // 3 banks 10ms, 1 repays 2 and banks 8
			{23 * ms, "acq", 1, []string{"shared 2"}},
			{32 * ms, "more", 2, []string{"grant 1 10ms/18ms"}},
		}},
		{"an expired holder keeps its place, once in a row", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{1 * ms, "acq", 2, []string{"shared 1"}},
			{10 * ms, "tick", 0, []string{"revoke 1"}},
			{12 * ms, "tick", 0, []string{"expire 1 again", "grant 2 10ms/10ms"}}, // 1 owes 2ms
			{20 * ms, "tick", 0, nil},                                             // 1 waits: 2 is not renewed
			{22 * ms, "tick", 0, []string{"revoke 2"}},
			{23 * ms, "more", 2, []string{"grant 1 8ms/8ms"}}, // 2 owes 1ms; 3 banks 10ms
			{31 * ms, "tick", 0, []string{"revoke 1"}},
			{33 * ms, "tick", 0, []string{"expire 1", "grant 2 9ms/9ms"}}, // twice in a row: no work
			{40 * ms, "tick", 0, []string{"renew 2 19ms/19ms"}},           // alone: renewed
		}},
		{"an ask or a release between expiries keeps the place again", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{1 * ms, "acq", 2, []string{"shared 1"}},
			{10 * ms, "tick", 0, []string{"revoke 1"}},
			{12 * ms, "tick", 0, []string{"expire 1 again", "grant 2 10ms/10ms"}},
			{13 * ms, "more", 1, nil}, // the late hand-over of the void grant, with more work
			{22 * ms, "tick", 0, []string{"revoke 2"}},
			{23 * ms, "more", 2, []string{"grant 1 8ms/8ms"}},
			{31 * ms, "tick", 0, []string{"revoke 1"}},
			{33 * ms, "tick", 0, []string{"expire 1 again", "grant 2 9ms/9ms"}},
			{40 * ms, "tick", 0, nil},
		}},
	})
}

// TestSchedulerPriority: an online tenant with a bank preempts an offline one
// at the next boundary (only with burst buffers); shares and explicit slices
// size the turns.
func TestSchedulerPriority(t *testing.T) {
	noBurst := testConfig()
	noBurst.Burst = false
	runSequences(t, []sequence{
		{"online tenant with bank preempts offline at the next boundary", testConfig(),
			[]tenantSpec{{1, Params{Priority: High}}, {2, Params{}}, {3, Params{}}}, []step{
				{0, "acq", 2, []string{"grant 2 10ms/10ms"}}, {0, "acq", 3, []string{"shared 2"}},
				{10 * ms, "more", 2, []string{"grant 3 10ms/10ms"}},
				{20 * ms, "more", 3, []string{"grant 2 10ms/10ms"}}, // 1 banks 20ms
				{22 * ms, "acq", 1, []string{"revoke 2"}},
				{23 * ms, "more", 2, []string{"grant 1 20ms/60ms!"}}, // 2 banks its 7ms left
				{63 * ms, "more", 1, []string{"grant 3 10ms/10ms"}},  // 1 spent 20ms of 40ms banked
				{73 * ms, "more", 3, []string{"grant 2 10ms/17ms"}},  // 1 forfeited this turn
				{90 * ms, "more", 2, []string{"grant 3 10ms/10ms"}},
				{100 * ms, "more", 3, []string{"grant 1 20ms/40ms"}},
			}},
		{"no preemption without burst buffers", noBurst,
			[]tenantSpec{{1, Params{Priority: High}}, {2, Params{}}}, []step{
				{0, "acq", 2, []string{"grant 2 10ms/10ms"}},
				{10 * ms, "more", 2, []string{"grant 2 10ms/10ms"}},
				{12 * ms, "acq", 1, []string{"shared 2"}},
				{20 * ms, "more", 2, []string{"grant 1 20ms/20ms"}},
			}},
		{"online without bank waits its turn", testConfig(),
			[]tenantSpec{{2, Params{}}, {1, Params{Priority: High}}}, []step{
				{0, "acq", 2, []string{"grant 2 10ms/10ms"}},
				{1 * ms, "acq", 1, []string{"shared 2"}},
				{10 * ms, "more", 2, []string{"grant 1 20ms/20ms"}},
			}},
		{"share of the period and explicit slices", testConfig(),
			[]tenantSpec{{1, Params{Share: 0.3}}, {2, Params{Slice: 5 * ms}}}, []step{
				{0, "acq", 1, []string{"grant 1 30ms/30ms"}}, {0, "acq", 2, []string{"shared 1"}},
				{30 * ms, "more", 1, []string{"grant 2 5ms/5ms"}},
			}},
	})
}

// TestSchedulerRenewal: a lone holder's grant is renewed before its end (not
// when shared, off, revoked or preempted), repaying its debt first.
func TestSchedulerRenewal(t *testing.T) {
	noRenew := testConfig()
	noRenew.Renew = 0
	runSequences(t, []sequence{
		{"a lone holder's grant is renewed before its end, others bank a slice", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{7 * ms, "tick", 0, nil},
			{8 * ms, "tick", 0, []string{"renew 1 20ms/20ms"}},  // 2 and 3 bank 10ms each
			{18 * ms, "tick", 0, []string{"renew 1 30ms/30ms"}}, // ... 20ms each
			{19 * ms, "acq", 2, []string{"shared 1"}},           // waits for the renewed end
			{28 * ms, "tick", 0, nil},                           // not alone: no renewal
			{30 * ms, "tick", 0, []string{"revoke 1"}},
			{31 * ms, "more", 1, []string{"grant 2 10ms/30ms"}}, // its slice + 20ms banked
		}},
		{"a renewed holder told it is shared keeps at least a slice", testConfig(), three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{8 * ms, "tick", 0, []string{"renew 1 20ms/20ms"}},
			{17 * ms, "acq", 3, []string{"shared 1"}}, // end 20ms -> 27ms
			{20 * ms, "tick", 0, nil},
			{27 * ms, "tick", 0, []string{"revoke 1"}},
		}},
		{"renewal off, or a revoked grant: hand over at the end", noRenew, three(), []step{
			{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
			{8 * ms, "tick", 0, nil},
			{10 * ms, "tick", 0, []string{"revoke 1"}},
			{11 * ms, "more", 1, []string{"grant 1 9ms/9ms"}}, // 1ms past its end: debt
		}},
		{"renewal repays debt and its lead is at most half the slice", testConfig(),
			[]tenantSpec{{1, Params{Slice: 2 * ms}}, {2, Params{}}}, []step{
				{0, "acq", 1, []string{"grant 1 2ms/2ms"}},
				{0, "acq", 2, []string{"shared 1"}},
				{3950 * us, "more", 1, []string{"grant 2 10ms/10ms"}},      // 1 owes 1.95ms
				{13950 * us, "rel", 2, []string{"grant 1 100µs/100µs"}},    // 1.9ms repaid
				{13950 * us, "tick", 0, []string{"renew 1 2.05ms/2.05ms"}}, // lead 1ms; 50µs repaid
				{14 * ms, "tick", 0, nil},
				{15 * ms, "tick", 0, []string{"renew 1 4.05ms/4.05ms"}},
			}},
		{"an online tenant preempting a lone holder stops renewal", testConfig(),
			[]tenantSpec{{1, Params{Priority: High}}, {2, Params{}}}, []step{
				{0, "acq", 2, []string{"grant 2 10ms/10ms"}},
				{8 * ms, "tick", 0, []string{"renew 2 20ms/20ms"}}, // 1 banks 20ms more (40ms)
				{9 * ms, "acq", 1, []string{"revoke 2"}},
				{9500 * us, "tick", 0, nil},
				{10 * ms, "more", 2, []string{"grant 1 20ms/60ms!"}},
			}},
	})
}

func TestStaleReleaseIgnored(t *testing.T) {
	s, _ := New(testConfig())
	for _, id := range []ID{1, 2} {
		if err := s.Add(id, Params{}); err != nil {
			t.Fatal(err)
		}
	}
	acts, _ := s.Acquire(1, t0)
	old := acts[0].Grant.Seq
	if _, err := s.Acquire(2, t0); err != nil {
		t.Fatal(err)
	}
	acts, _ = s.Release(1, old, t0.Add(10*ms), true)
	if render(acts)[0] != "grant 2 10ms/10ms" {
		t.Fatalf("got %v", render(acts))
	}
	if acts, _ = s.Release(1, old, t0.Add(11*ms), true); acts != nil {
		t.Fatalf("stale release acted: %v", render(acts))
	}
	if g, _ := s.Holder(); g.Tenant != 2 {
		t.Fatalf("holder %d, want 2", g.Tenant)
	}
}

func TestErrors(t *testing.T) {
	bad := []struct {
		name string
		p    Params
		want string
	}{
		{"both", Params{Slice: ms, Share: 0.5}, "either a slice or a share"},
		{"negative slice", Params{Slice: -ms}, "slice -1ms"},
		{"huge slice", Params{Slice: time.Hour}, "slice 1h0m0s"},
		{"share over 100%", Params{Share: 1.5}, "share 1.5"},
		{"priority", Params{Priority: 7}, "unknown priority"},
	}
	s, _ := New(testConfig())
	if err := s.Add(1, Params{}); err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		if err := s.Add(2, b.p); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: Add error %v, want %q", b.name, err, b.want)
		}
		if err := s.Update(1, b.p); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: Update error %v, want %q", b.name, err, b.want)
		}
	}
	if st := s.Stats(t0); len(st) != 1 || st[0].Params != (Params{}) {
		t.Fatalf("bad input changed state: %+v", st)
	}
	if err := s.Add(1, Params{}); err == nil {
		t.Error("duplicate tenant accepted")
	}
	if _, err := s.Acquire(9, t0); err == nil {
		t.Error("unknown tenant acquired")
	}
	cfg := testConfig()
	cfg.Period = 0
	if _, err := New(cfg); err == nil {
		t.Error("zero period accepted")
	}
	if _, err := ParsePriority("urgent"); err == nil {
		t.Error("bad priority parsed")
	}
}

func TestStats(t *testing.T) {
	s := runSteps(t, testConfig(), []tenantSpec{{1, Params{}}, {2, Params{Priority: High}}}, []step{
		{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
		{4 * ms, "rel", 1, nil},
		{5 * ms, "acq", 2, []string{"grant 2 20ms/20ms"}},
	})
	st := s.Stats(t0.Add(8 * ms))
	want := []TenantStats{
		{ID: 1, Slice: 10 * ms, Banked: 6 * ms, Achieved: 4 * ms, Grants: 1},
		{ID: 2, Params: Params{Priority: High}, Slice: 20 * ms, Achieved: 3 * ms, Grants: 1, Waiting: true, Holding: true},
	}
	if !slices.Equal(st, want) {
		t.Fatalf("stats\n got %+v\nwant %+v", st, want)
	}
	// 2 holds alone: its grant (to 25ms) is renewed 2ms before its end.
	if at, ok := s.NextDeadline(); !ok || !at.Equal(t0.Add(23*ms)) {
		t.Fatalf("deadline %v %v", at, ok)
	}
}

// TestQueuedStopsRenewal: a holder with work queued for its next turn (a
// member of its group waits) is not renewed; an Alone grant says it no longer is.
func TestQueuedStopsRenewal(t *testing.T) {
	s, _ := New(testConfig())
	if err := s.Add(1, Params{}); err != nil {
		t.Fatal(err)
	}
	acts, _ := s.Acquire(1, t0)
	if !acts[0].Grant.Alone {
		t.Fatalf("a lone tenant's grant is not Alone: %+v", acts[0].Grant)
	}
	if got := render(s.Queued(1)); !slices.Equal(got, []string{"shared 1"}) {
		t.Fatalf("Queued: %q", got)
	}
	if acts := s.Queued(1); acts != nil {
		t.Fatalf("Queued again: %q", render(acts))
	}
	if at, _ := s.NextDeadline(); !at.Equal(t0.Add(10 * ms)) {
		t.Fatalf("deadline %v, want the grant's end (no renewal)", at.Sub(t0))
	}
	if got := render(s.Tick(t0.Add(10 * ms))); !slices.Equal(got, []string{"revoke 1"}) {
		t.Fatalf("at the end: %q", got)
	}
}

// TestCappedNotRenewed: a tenant with a ceiling hands over at its grant's end
// even alone (its ceiling is enforced at grant boundaries).
func TestCappedNotRenewed(t *testing.T) {
	s, _ := New(testConfig())
	if err := s.Add(1, Params{ShareMax: 0.5}); err != nil {
		t.Fatal(err)
	}
	acts, _ := s.Acquire(1, t0)
	if g := acts[0].Grant; g.Alone {
		t.Fatalf("a capped tenant's grant is Alone: %+v", g)
	}
	if got := render(s.Tick(t0.Add(8 * ms))); got != nil {
		t.Fatalf("renewed: %q", got)
	}
	if got := render(s.Tick(t0.Add(10 * ms))); !slices.Equal(got, []string{"revoke 1"}) {
		t.Fatalf("at the end: %q", got)
	}
}
