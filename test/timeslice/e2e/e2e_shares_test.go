//go:build timeslicee2e

package timeslicee2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/internal/timeslice"
)

// Shares end to end: busy and synchronizing tenants on the simulated GPU.
// TestE2EShares asserts on quantities the machine's load does not change: the
// time the daemon granted each group and the kernel time each group ran on the
// simulated GPU, over the whole run (not per wall-clock window). The 1 s
// windows, the GPU's busy fraction and the CPU run delays of the tenants (per
// tenant its longest-waiting thread, summed) and of the daemon's threads are
// figures for BenchmarkE2EShares: a tenant starved of CPU cannot keep the GPU
// busy or hand over in time, so those depend on the load.

const (
	starvedLimit       = 50 * time.Millisecond  // 5% of a window, all tenants together
	daemonStarvedLimit = 100 * time.Millisecond // one thread; the daemon's process is the test's
	shareBoundPP       = 3.0                    // granted and run shares, percentage points
)

// winStat is one tenant's 1 s window: kernels launched, CPU run delay.
type winStat struct {
	kernels int
	delay   time.Duration
}

// windows parses "win <i> <kernels> [<run delay ns>]" lines.
func windows(lines []string) map[int]winStat {
	w := map[int]winStat{}
	for _, l := range lines {
		var i, n int
		var d int64
		if c, _ := fmt.Sscanf(l, "win %d %d %d", &i, &n, &d); c >= 2 {
			w[i] = winStat{kernels: n, delay: time.Duration(d)}
		}
	}
	return w
}

// shareWin is one full 1 s window of a shares run.
type shareWin struct {
	errWork float64       // worst |GPU work share - configured share|, percentage points
	errHeld float64       // the same for the time the daemon granted
	busy    float64       // fraction of the window the GPU ran kernels
	starved time.Duration // CPU run delay of the tenants (longest-waiting thread of each, summed)
	daemon  time.Duration // longest CPU run delay of a thread of the daemon's process
	missing bool          // no status sample: not measured
}

func (w shareWin) clean() bool {
	return !w.missing && w.starved < starvedLimit && w.daemon < daemonStarvedLimit
}

type shareResult []shareWin

// summary is the worst of the windows that were not starved of CPU.
type shareSummary struct {
	clean, total          int
	worstWork, worstHeld  float64
	minBusy               float64
	maxStarved, maxDaemon time.Duration // over all windows
}

func (r shareResult) summary() shareSummary {
	s := shareSummary{total: len(r), minBusy: 1}
	for _, w := range r {
		s.maxStarved, s.maxDaemon = max(s.maxStarved, w.starved), max(s.maxDaemon, w.daemon)
		if !w.clean() {
			continue
		}
		s.clean++
		s.worstWork, s.worstHeld = max(s.worstWork, w.errWork), max(s.worstHeld, w.errHeld)
		s.minBusy = min(s.minBusy, w.busy)
	}
	return s
}

func (s shareSummary) String() string {
	return fmt.Sprintf("%d of %d windows not starved of CPU (most CPU wait in a window: tenants %v, daemon %v): worst share error "+
		"%.2f pp (kernels run), %.2f pp (time granted); GPU busy >= %.1f%%", s.clean, s.total,
		s.maxStarved.Round(time.Millisecond), s.maxDaemon.Round(time.Millisecond), s.worstWork, s.worstHeld, s.minBusy*100)
}

// sharesRun runs busy (even) and sync-after-every-kernel (odd) tenants with
// slices 5, 10, 15 ms (repeating) for secs seconds.
func sharesRun(t testing.TB, e *e2e, n int, secs int) shareRun {
	r, _ := sharesRunOverrun(t, e, n, secs)
	return r
}

// shareRun is a shares run: its 1 s windows and the whole run (windows 1 to
// the last, summed: granted time and kernel time per group).
type shareRun struct {
	wins               shareResult
	whole              shareWin
	slices, held, work []float64 // per group: slice (ms), granted (ns) and kernel time run (s), whole run
}

// overrunStat: the tenants' hand-overs after a revoke, the worst p99 and the
// longest time past it (the daemon's status), and the same as a percentage of
// the group's slice (the worst group: the work it left queued past its slice).
type overrunStat struct {
	n              uint64
	p99, max       time.Duration
	p99Pct, maxPct float64
}

func overrunOf(st *nodestatus.Status) overrunStat {
	var o overrunStat
	for _, g := range st.GPUs {
		for _, gr := range g.Groups {
			o.n += gr.Overruns
			o.p99, o.max = max(o.p99, time.Duration(gr.OverrunP99Ns)), max(o.max, time.Duration(gr.OverrunMaxNs))
			if gr.SliceNs > 0 {
				o.p99Pct = max(o.p99Pct, 100*float64(gr.OverrunP99Ns)/float64(gr.SliceNs))
				o.maxPct = max(o.maxPct, 100*float64(gr.OverrunMaxNs)/float64(gr.SliceNs))
			}
		}
	}
	return o
}

func sharesRunOverrun(t testing.TB, e *e2e, n int, secs int) (shareRun, overrunStat) {
	cfg := testCfg(t)
	cfg.Policy = policy.DefaultConfig()
	startDaemon(t, cfg)
	var specs []tenantSpec
	kernel, slices := make([]float64, n), make([]float64, n)
	var total float64
	for i := range n {
		name := fmt.Sprintf("t%d", i)
		slices[i] = float64((i%3 + 1) * 5)
		total += slices[i]
		setGroup(t, cfg, name, group.Change{File: "slice", Value: fmt.Sprintf("%.0fms", slices[i])})
		mode, k := "busy", 500
		if i%2 == 1 {
			mode, k = "sync", 1000
		}
		kernel[i] = float64(k) / 1e6
		// One second past the last sample (t0 + secs): a group's status goes
		// when its tenant exits, so a sample taken as the tenants ended (the
		// sampler a little late) read no granted time at all.
		specs = append(specs, tenantSpec{name, []string{"--mode", mode, "--kernel-us", strconv.Itoa(k), "--seconds", strconv.Itoa(secs + 1)}})
	}
	held := make(chan []heldSample, 1)
	t0 := time.Now().Add(1500 * time.Millisecond)
	go func() { held <- sampleHeld(cfg, t0, secs) }()
	outs := e.run(t, cfg, filepath.Join(cfg.RunDir, "sim.state"), specs, t0)
	samples := <-held
	var over overrunStat // the last sample that has them (groups go when their tenants exit)
	for _, s := range samples {
		if s.over.n >= over.n {
			over = s.over
		}
	}
	if testing.Verbose() {
		t.Logf("kernels per window: %q", outs)
		for k := 1; k < len(samples); k++ {
			t.Logf("second %d: granted ns %v, daemon run delay %v", k, samples[k].granted, samples[k].delay(samples[k-1]))
		}
	}
	wins := make([]map[int]winStat, n)
	for i := range n {
		wins[i] = windows(outs[i])
	}
	var r shareRun
	wholeWork, wholeHeld := make([]float64, n), make([]float64, n)
	for win := 1; win < secs; win++ { // window 0 includes connecting
		w := shareWin{daemon: samples[win+1].delay(samples[win])}
		work, granted := make([]float64, n), make([]float64, n)
		for i := range n {
			name := fmt.Sprintf("t%d", i)
			work[i] = float64(wins[i][win].kernels) * kernel[i]
			granted[i] = float64(samples[win+1].granted[name] - samples[win].granted[name])
			wholeWork[i], wholeHeld[i] = wholeWork[i]+work[i], wholeHeld[i]+granted[i]
			w.starved += wins[i][win].delay
		}
		shareErrors(&w, work, granted, slices, total)
		r.wins = append(r.wins, w)
		r.whole.starved, r.whole.daemon = r.whole.starved+w.starved, max(r.whole.daemon, w.daemon)
	}
	shareErrors(&r.whole, wholeWork, wholeHeld, slices, total)
	r.slices, r.held, r.work = slices, wholeHeld, wholeWork
	r.whole.busy /= float64(secs - 1)
	return r, over
}

// shareErrors fills w's share errors and busy time (seconds of kernels run)
// from each group's kernel time and granted time.
func shareErrors(w *shareWin, work, granted, slices []float64, total float64) {
	var workSum, heldSum float64
	for i := range work {
		workSum, heldSum = workSum+work[i], heldSum+granted[i]
	}
	w.busy = workSum
	w.missing = heldSum <= 0 || workSum <= 0
	for i := range work {
		want := slices[i] / total
		w.errWork = max(w.errWork, 100*abs(work[i]/workSum-want))
		w.errHeld = max(w.errHeld, 100*abs(granted[i]/heldSum-want))
	}
}

func abs(x float64) float64 { return max(x, -x) }

// heldSample is the daemon's cumulative granted time per group, and the CPU
// run delay of each thread of this process (the daemon's), at one instant.
type heldSample struct {
	granted map[string]int64
	delays  map[string]time.Duration
	over    overrunStat
}

// delay is the longest any one thread of this process waited for a CPU
// between two samples.
func (s heldSample) delay(prev heldSample) time.Duration {
	var d time.Duration
	for tid, v := range s.delays {
		d = max(d, v-prev.delays[tid])
	}
	return d
}

// sampleHeld samples at t0 + k s.
func sampleHeld(cfg timeslice.Config, t0 time.Time, secs int) []heldSample {
	out := make([]heldSample, secs+1)
	for k := range secs + 1 {
		time.Sleep(time.Until(t0.Add(time.Duration(k) * time.Second)))
		out[k] = heldSample{granted: map[string]int64{}, delays: runDelays()}
		st, err := nodestatus.Read(cfg.RunDir)
		for try := 0; err != nil && try < 5; try++ { // not written yet
			time.Sleep(5 * time.Millisecond)
			st, err = nodestatus.Read(cfg.RunDir)
		}
		if err == nil {
			out[k].over = overrunOf(st)
			for _, g := range st.GPUs {
				for _, e := range g.Groups {
					out[k].granted[e.Group] = e.AchievedNs
				}
			}
		}
	}
	return out
}

// runDelays is how long each thread of this process has waited for a CPU
// while runnable (/proc/self/task/*/schedstat; empty where unavailable).
func runDelays() map[string]time.Duration {
	out := map[string]time.Duration{}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return out
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			if d, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				out[task.Name()] = time.Duration(d)
			}
		}
	}
	return out
}

// TestE2EShares: busy and synchronizing tenants with 5, 10 and 15 ms slices on
// the simulated GPU, over the whole run (4 s), one run, no retry, no skip:
//   - every group is granted time and runs kernels;
//   - no group runs more kernel time on the simulated GPU than the daemon
//     granted it (5% and 50 ms for the sampling edges): the gate holds each
//     group to its grants;
//   - a group with a larger slice is granted more time and runs more kernel
//     time than one with a smaller slice.
//
// These hold however loaded the machine is: a tenant starved of CPU hands over
// late (its grant lasts longer) and launches less (less kernel time), which
// moves both further from the edge of the second bound. The share errors
// (within 0.1-2.3 points of the configured shares on this VM when it is not
// starved, up to 11 beside two busy loops) are logged here; the per-window
// figures are BenchmarkE2EShares's. 2 tenants always; 4 and 8 with
// GPUSLICE_NODE_E2E_SHARES=1 (make test-node).
func TestE2EShares(t *testing.T) {
	e := setupE2E(t)
	sizes := []int{2}
	if os.Getenv("GPUSLICE_NODE_E2E_SHARES") != "" {
		sizes = []int{2, 4, 8}
	}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("tenants=%d", n), func(t *testing.T) {
			r := sharesRun(t, e, n, 5)
			w := r.whole
			t.Logf("%d tenants, whole run: worst share error %.2f pp (kernel time run), %.2f pp (time granted); "+
				"GPU busy %.1f%%, CPU waits: tenants %v, daemon thread at most %v in a second", n, w.errWork, w.errHeld,
				w.busy*100, w.starved.Round(time.Millisecond), w.daemon.Round(time.Millisecond))
			checkShares(t, r)
		})
	}
}

// checkShares asserts TestE2EShares's bounds on a run.
func checkShares(t *testing.T, r shareRun) {
	t.Helper()
	for i := range r.slices {
		granted, ran := r.held[i]/1e9, r.work[i]
		if granted <= 0 || ran <= 0 {
			t.Errorf("group t%d granted %.3f s, ran %.3f s of kernels: want both > 0", i, granted, ran)
		}
		if ran > granted*1.05+0.05 {
			t.Errorf("group t%d ran %.3f s of kernels on the simulated GPU, granted %.3f s", i, ran, granted)
		}
		for j := range r.slices {
			if r.slices[i] < r.slices[j] && (r.held[i] >= r.held[j] || r.work[i] >= r.work[j]) {
				t.Errorf("group t%d (slice %.0f ms) granted %.3f s, ran %.3f s; t%d (slice %.0f ms) %.3f s, %.3f s: "+
					"want less", i, r.slices[i], granted, ran, j, r.slices[j], r.held[j]/1e9, r.work[j])
			}
		}
	}
}
