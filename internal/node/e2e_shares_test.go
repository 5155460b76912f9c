package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/slice"
)

// Shares end to end: busy and synchronizing tenants on the simulated GPU.
// A tenant starved of CPU cannot keep the GPU busy or hand over in time, so
// every 1 s window also records how long the tenants waited for a CPU while
// runnable (per tenant its longest-waiting thread, summed over the tenants:
// a tenant that holds the GPU and waits for a CPU leaves it idle; the others
// sleep) and the longest any thread of the daemon (this process) waited. The
// bounds are asserted on the windows where the tenants waited less than
// starvedLimit and no daemon thread daemonStarvedLimit. On this 2-core VM:
// 15-20 ms / 15-25 ms unloaded, about 40 / 50 ms beside one busy process
// (results unchanged), 150-200 / 50-90 ms beside two (GPU busy 81-84%).

const (
	starvedLimit       = 50 * time.Millisecond  // 5% of a window, all tenants together
	daemonStarvedLimit = 100 * time.Millisecond // one thread; the daemon's process is the test's
	shareBoundPP       = 3.0                    // granted and run shares, percentage points
	busyBound          = 0.85                   // least fraction of a window the GPU runs kernels
	minClean           = 2                      // windows a run needs to count
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

func (s shareSummary) ok() bool {
	return s.worstWork <= shareBoundPP && s.worstHeld <= shareBoundPP && s.minBusy >= busyBound
}

// sharesRun runs busy (even) and sync-after-every-kernel (odd) tenants with
// slices 5, 10, 15 ms (repeating) for secs seconds.
func sharesRun(t testing.TB, e *e2e, n int, secs int) shareResult {
	r, _ := sharesRunOverrun(t, e, n, secs)
	return r
}

// overrunStat: the tenants' hand-overs after a revoke, the worst p99 and the
// longest time past it (the daemon's status).
type overrunStat struct {
	n        uint64
	p99, max time.Duration
}

func overrunOf(st *Status) overrunStat {
	var o overrunStat
	for _, g := range st.GPUs {
		for _, gr := range g.Groups {
			o.n += gr.Overruns
			o.p99, o.max = max(o.p99, time.Duration(gr.OverrunP99Ns)), max(o.max, time.Duration(gr.OverrunMaxNs))
		}
	}
	return o
}

func sharesRunOverrun(t testing.TB, e *e2e, n int, secs int) (shareResult, overrunStat) {
	cfg := testCfg(t)
	cfg.Policy = slice.DefaultConfig()
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
		specs = append(specs, tenantSpec{name, []string{"--mode", mode, "--kernel-us", strconv.Itoa(k), "--seconds", strconv.Itoa(secs)}})
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
	var r shareResult
	for win := 1; win < secs; win++ { // window 0 includes connecting
		w := shareWin{daemon: samples[win+1].delay(samples[win])}
		work, granted := make([]float64, n), make([]float64, n)
		var workSum, heldSum float64
		for i := range n {
			name := fmt.Sprintf("t%d", i)
			work[i] = float64(wins[i][win].kernels) * kernel[i]
			granted[i] = float64(samples[win+1].granted[name] - samples[win].granted[name])
			workSum, heldSum = workSum+work[i], heldSum+granted[i]
			w.starved += wins[i][win].delay
		}
		w.busy = workSum
		w.missing = heldSum <= 0 || workSum <= 0
		for i := range n {
			want := slices[i] / total
			w.errWork = max(w.errWork, 100*abs(work[i]/workSum-want))
			w.errHeld = max(w.errHeld, 100*abs(granted[i]/heldSum-want))
		}
		r = append(r, w)
	}
	return r, over
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
func sampleHeld(cfg Config, t0 time.Time, secs int) []heldSample {
	out := make([]heldSample, secs+1)
	for k := range secs + 1 {
		time.Sleep(time.Until(t0.Add(time.Duration(k) * time.Second)))
		out[k] = heldSample{granted: map[string]int64{}, delays: runDelays()}
		st, err := ReadStatus(cfg.RunDir)
		for try := 0; err != nil && try < 5; try++ { // not written yet
			time.Sleep(5 * time.Millisecond)
			st, err = ReadStatus(cfg.RunDir)
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

// TestE2EShares: busy and synchronizing tenants with 5, 10 and 15 ms slices
// share the simulated GPU in proportion: the time the daemon grants and the
// kernels that run within 3 points per 1 s window, the GPU at least 85% busy,
// on every window where the tenants and the daemon were not starved of CPU.
// A run counts with at least two such windows; one of two counted runs must
// meet every bound; after three runs with none counted (a machine too loaded
// to measure) the test skips, saying so. 2 tenants always; 4 and 8 with
// GPUSLICE_NODE_E2E_SHARES=1 (make test-node runs them alone, not beside
// other packages' tests).
func TestE2EShares(t *testing.T) {
	e := setupE2E(t)
	sizes := []int{2}
	if os.Getenv("GPUSLICE_NODE_E2E_SHARES") != "" {
		sizes = []int{2, 4, 8}
	}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("tenants=%d", n), func(t *testing.T) {
			var failed []shareSummary
			for attempt := 1; attempt <= 3 && len(failed) < 2; attempt++ {
				s := sharesRun(t, e, n, 5).summary()
				t.Logf("attempt %d, %d tenants: %v", attempt, n, s)
				if s.clean < minClean {
					continue
				}
				if s.ok() {
					return
				}
				failed = append(failed, s)
			}
			if len(failed) == 0 {
				t.Skipf("tenant or daemon threads waited for a CPU for %v / %v or more in most windows: "+
					"this machine is too loaded to measure shares", starvedLimit, daemonStarvedLimit)
			}
			t.Fatalf("want shares within %.0f pp and the GPU >= %.0f%% busy: %v", shareBoundPP, busyBound*100, failed)
		})
	}
}
