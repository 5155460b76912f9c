package policy

import (
	"testing"
	"time"
)

// Hand-overs after a revoke are kept with how long past it they came; an
// early release is not one; an expired grant counts the grace.
func TestOverruns(t *testing.T) {
	s := runSteps(t, testConfig(), []tenantSpec{{1, Params{}}, {2, Params{}}}, []step{
		{0, "acq", 1, []string{"grant 1 10ms/10ms"}},
		{1 * ms, "acq", 2, []string{"shared 1"}},
		{10 * ms, "tick", 0, []string{"revoke 1"}},
		{13 * ms, "more", 1, []string{"grant 2 10ms/10ms"}}, // 3 ms past its end
		{15 * ms, "more", 2, []string{"grant 1 7ms/7ms"}},   // early: not an overrun; 1 repays 3 ms of debt
		{22 * ms, "tick", 0, []string{"revoke 1"}},
	})
	st := s.Stats(t0.Add(23 * ms))
	if o := st[0]; o.Overruns != 1 || o.OverrunMax != 3*ms || o.OverrunP99 != 3*ms {
		t.Fatalf("tenant 1: %d overruns, max %v, p99 %v; want 1, 3ms, 3ms", o.Overruns, o.OverrunMax, o.OverrunP99)
	}
	if o := st[1]; o.Overruns != 0 || o.OverrunMax != 0 {
		t.Fatalf("tenant 2 released early: %d overruns, max %v", o.Overruns, o.OverrunMax)
	}
	s.Tick(t0.Add(22*ms + testConfig().Grace)) // expired: the grace
	if o := s.Stats(t0.Add(60 * ms))[0]; o.Overruns != 2 || o.OverrunMax != 3*ms || o.OverrunP99 != 3*ms {
		t.Fatalf("after expiry (the grace, 2ms): %d overruns, max %v, p99 %v; want 2, 3ms, 3ms", o.Overruns,
			o.OverrunMax, o.OverrunP99)
	}
	var o overruns
	for i := range 1000 {
		o.add(time.Duration(i%100) * ms / 10) // 0..9.9 ms, the last 256 kept
	}
	if p := o.p99(); p < 9*ms || p > 10*ms || o.max != 99*ms/10 {
		t.Fatalf("p99 %v max %v", p, o.max)
	}
}
