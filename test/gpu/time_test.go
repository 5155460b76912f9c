//go:build gpusuite

package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	shareSeconds = 6   // each share run; the first and last windows are not counted
	shareKernel  = 500 // us, the busy kernel of the share runs
	shareBoundPP = 5.0 // |achieved - configured| share, percentage points
)

// tenant is one gs-tenant process under `gpuslice run`.
type tenant struct {
	flags []string // gpuslice run flags
	args  []string // gs-tenant flags (t0 and seconds are added)
}

// runTenants starts every tenant at one t0 and returns each one's stdout lines.
func (s *suite) runTenants(t *testing.T, seconds float64, ts []tenant) [][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+60)*time.Second)
	defer cancel()
	t0 := time.Now().Add(1500 * time.Millisecond).UnixNano()
	outs := make([][]string, len(ts))
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i, tn := range ts {
		args := append([]string{"gs-tenant"}, tn.args...)
		args = append(args, "--t0", fmt.Sprint(t0), "--seconds", fmt.Sprint(seconds))
		c := s.gpusliceRun(ctx, tn.flags, args...)
		wg.Add(1)
		go func(i int, c *exec.Cmd) {
			defer wg.Done()
			out, err := c.Output()
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				err = fmt.Errorf("%w: %s", err, ee.Stderr)
			}
			outs[i], errs[i] = strings.Split(strings.TrimSpace(string(out)), "\n"), err
		}(i, c)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("tenant %d (%v): %v", i, ts[i].flags, err)
		}
	}
	return outs
}

// kernels sums "win <i> <kernels> ..." over the full windows 1..seconds-2.
func kernels(lines []string, seconds int) float64 {
	var n float64
	for _, l := range lines {
		var w, k int
		if c, _ := fmt.Sscanf(l, "win %d %d", &w, &k); c == 2 && w >= 1 && w <= seconds-2 {
			n += float64(k)
		}
	}
	return n
}

func (s *suite) testTime(t *testing.T) {
	for _, shares := range [][]int{{25, 75}, {10, 20, 30, 40}} {
		t.Run(fmt.Sprintf("Shares%v", shares), func(t *testing.T) { s.testShares(t, shares) })
	}
	t.Run("OnlineBesideOffline", s.testLatency)
}

// Busy tenants with configured shares (every other one syncs after each kernel):
// the GPU time each gets, from the kernels it ran, and how busy the GPU was.
func (s *suite) testShares(t *testing.T, shares []int) {
	var ts []tenant
	for i, sh := range shares {
		mode := "busy"
		if i%2 == 1 {
			mode = "sync"
		}
		ts = append(ts, tenant{
			flags: []string{"--group", fmt.Sprintf("share%d-%d", len(shares), i), "--share", fmt.Sprintf("%d%%", sh)},
			args:  []string{"--mode", mode, "--kernel-us", fmt.Sprint(shareKernel)},
		})
	}
	outs := s.runTenants(t, shareSeconds, ts)
	var total float64
	got := make([]float64, len(outs))
	for i, o := range outs {
		got[i] = kernels(o, shareSeconds)
		total += got[i]
	}
	if total == 0 {
		t.Fatalf("no kernels ran: %v", outs)
	}
	var worst float64
	parts := make([]string, len(shares))
	for i, sh := range shares {
		pct := 100 * got[i] / total
		worst = math.Max(worst, math.Abs(pct-float64(sh)))
		parts[i] = fmt.Sprintf("%.1f%%", pct)
	}
	busy := 100 * total * shareKernel * 1e-6 / float64(shareSeconds-2)
	if worst > shareBoundPP {
		t.Errorf("shares %v achieved %v: worst error %.1f pp (bound %.0f pp)", shares, parts, worst, shareBoundPP)
	}
	s.record(t, "time", fmt.Sprintf("shares %v, busy and sync tenants", shares),
		fmt.Sprintf("%s (worst %.1f pp), GPU busy %.0f%%", strings.Join(parts, " / "), worst, busy))
}

// latencies parses "lat <ns>" lines into sorted milliseconds.
func latencies(lines []string) []float64 {
	var ms []float64
	for _, l := range lines {
		var ns int64
		if _, err := fmt.Sscanf(l, "lat %d", &ns); err == nil {
			ms = append(ms, float64(ns)/1e6)
		}
	}
	sort.Float64s(ms)
	return ms
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	return sorted[int(math.Min(float64(len(sorted)-1), p*float64(len(sorted))))]
}

// Two identical online tenants (requests of 4 x 1 ms kernels every 50 ms) beside
// three busy offline ones, in one run: one with priority high, its twin with the
// offline tenants' priority (the equal split). Both see the same machine, so the
// ordering asserted (the high one's median latency below its twin's) does not
// depend on the machine's load; the p50/p99 of both and of the tenant alone are
// reported.
func (s *suite) testLatency(t *testing.T) {
	const seconds = 8
	online := []string{"--mode", "requests", "--kernel-us", "1000", "--n", "4", "--gap-ms", "50", "--jitter-ms", "10"}
	offline := []string{"--mode", "busy", "--kernel-us", "2000"}
	alone := latencies(s.runTenants(t, seconds, []tenant{{flags: []string{"--group", "alone-online", "--priority", "high"}, args: online}})[0])
	ts := []tenant{
		{flags: []string{"--group", "mix-online-high", "--priority", "high"}, args: online},
		{flags: []string{"--group", "mix-online-equal", "--priority", "low"}, args: online},
	}
	for i := 0; i < 3; i++ {
		ts = append(ts, tenant{flags: []string{"--group", fmt.Sprintf("mix-off%d", i), "--priority", "low"}, args: offline})
	}
	outs := s.runTenants(t, seconds, ts)
	prio, equal := latencies(outs[0]), latencies(outs[1])
	if len(prio) < 10 || len(equal) < 10 {
		t.Fatalf("too few requests: %d with priority high, %d equal", len(prio), len(equal))
	}
	if pct(prio, 0.5) >= pct(equal, 0.5) {
		t.Errorf("online median latency with priority high %.1f ms is not below its equal-priority twin's %.1f ms (same run)", pct(prio, 0.5), pct(equal, 0.5))
	}
	s.record(t, "time", "online request latency beside 3 busy offline tenants (p50/p99 ms)",
		fmt.Sprintf("priority high %.1f/%.1f, equal twin %.1f/%.1f (same run), alone %.1f/%.1f",
			pct(prio, 0.5), pct(prio, 0.99), pct(equal, 0.5), pct(equal, 0.99), pct(alone, 0.5), pct(alone, 0.99)))
}
