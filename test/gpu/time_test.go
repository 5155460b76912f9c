//go:build gpusuite

package gpu

import (
	"bytes"
	"context"
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
	return s.watchTenants(t, seconds, ts, nil)
}

// watchTenants is runTenants with watch (if not nil) run beside the tenants,
// given t0 and their `gpuslice run` processes' pids; it returns before they
// are waited for.
func (s *suite) watchTenants(t *testing.T, seconds float64, ts []tenant, watch func(t0 time.Time, pids []int)) [][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+60)*time.Second)
	defer cancel()
	t0 := time.Now().Add(1500 * time.Millisecond)
	outs := make([][]string, len(ts))
	errs := make([]error, len(ts))
	pids := make([]int, len(ts))
	var wg sync.WaitGroup
	for i, tn := range ts {
		args := append([]string{"gs-tenant"}, tn.args...)
		args = append(args, "--t0", fmt.Sprint(t0.UnixNano()), "--seconds", fmt.Sprint(seconds))
		c := s.gpusliceRun(ctx, tn.flags, args...)
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		if err := c.Start(); err != nil {
			t.Fatalf("tenant %d (%v): %v", i, tn.flags, err)
		}
		pids[i] = c.Process.Pid
		wg.Add(1)
		go func(i int, c *exec.Cmd) {
			defer wg.Done()
			err := c.Wait()
			if err != nil {
				err = fmt.Errorf("%w: %s", err, stderr.String())
			}
			outs[i], errs[i] = strings.Split(strings.TrimSpace(stdout.String()), "\n"), err
		}(i, c)
	}
	if watch != nil {
		watch(t0, pids)
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

// Busy tenants with configured shares (every other one syncs after each
// kernel): each group's share of the GPU time the daemon granted over the
// full windows, within 5 points. The grants are what gpuslice enforces and
// they hold under CPU starvation: a starved tenant keeps its request
// queued (the gate does not take a launcher running or waiting for a CPU for
// idle, and the daemon keeps the place of a holder whose grant expired), and a
// grant it cannot use for want of a CPU still counts as its own (measured at
// load 8 on 2 cores: granted shares within 1.4 points while the kernel shares
// were 10 points off; before those two, 25/75 got 28-32 % / 72-68 % at 37-63
// points of CPU wait). Reported, not asserted: the share
// of the kernels each ran and how busy the GPU was (they move with the
// machine's load), and the points the tenants' threads waited for a CPU
// (test/node-e2e's starvation term; 48-52 points at that load, too loose to
// bound anything).
func (s *suite) testShares(t *testing.T, shares []int) {
	var ts []tenant
	groups := make([]string, len(shares))
	for i, sh := range shares {
		mode := "busy"
		if i%2 == 1 {
			mode = "sync"
		}
		groups[i] = fmt.Sprintf("share%d-%d", len(shares), i)
		ts = append(ts, tenant{
			flags: []string{"--group", groups[i], "--share", fmt.Sprintf("%d%%", sh)},
			args:  []string{"--mode", mode, "--kernel-us", fmt.Sprint(shareKernel)},
		})
	}
	var first, last grantSample
	var sampleErr error
	outs := s.watchTenants(t, shareSeconds, ts, func(t0 time.Time, pids []int) {
		time.Sleep(time.Until(t0.Add(time.Second)))
		first, sampleErr = s.sampleGrants(groups, pids)
		time.Sleep(time.Until(t0.Add((shareSeconds - 1) * time.Second)))
		if sampleErr == nil {
			last, sampleErr = s.sampleGrants(groups, pids)
		}
	})
	if sampleErr != nil {
		t.Fatal(sampleErr)
	}
	granted, starved, err := grantShares(first, last)
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	parts := make([]string, len(shares))
	for i, sh := range shares {
		worst = math.Max(worst, math.Abs(granted[i]-float64(sh)))
		parts[i] = fmt.Sprintf("%.1f%%", granted[i])
	}
	if worst > shareBoundPP {
		t.Errorf("shares %v granted %v: worst error %.1f pp (bound %.0f pp; the tenants waited %.1f pp for a CPU; kernels %s)",
			shares, parts, worst, shareBoundPP, starved, kernelShares(outs))
	}
	s.record(t, "time", fmt.Sprintf("shares %v, busy and sync tenants", shares),
		fmt.Sprintf("granted %s (worst %.1f pp, CPU wait %.1f pp); kernels %s", strings.Join(parts, " / "), worst, starved, kernelShares(outs)))
}

// kernelShares is each tenant's share of the kernels run over the full
// windows and how busy they kept the GPU, for the report.
func kernelShares(outs [][]string) string {
	var total float64
	got := make([]float64, len(outs))
	for i, o := range outs {
		got[i] = kernels(o, shareSeconds)
		total += got[i]
	}
	if total == 0 {
		return "none run"
	}
	parts := make([]string, len(outs))
	for i := range got {
		parts[i] = fmt.Sprintf("%.1f%%", 100*got[i]/total)
	}
	busy := 100 * total * shareKernel * 1e-6 / float64(shareSeconds-2)
	return fmt.Sprintf("%s, GPU busy %.0f%%", strings.Join(parts, " / "), busy)
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
