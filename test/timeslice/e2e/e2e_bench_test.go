//go:build timeslicee2e

package timeslicee2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/policy"
)

// BenchmarkE2EShares: 2, 4 and 8 tenants (half synchronizing after every
// kernel) on the simulated GPU; reports, over the 1 s windows in which no
// tenant nor the daemon was starved of CPU, the worst share error (kernels run
// and time granted) and the least GPU busy fraction, and how many windows
// counted; the same over all windows (-all).
func BenchmarkE2EShares(b *testing.B) {
	e := setupE2E(b)
	for _, n := range []int{2, 4, 8} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			for b.Loop() {
				r, over := sharesRunOverrun(b, e, n, 6)
				b.Logf("%d tenants: %d hand-overs after a revoke, p99 %v past it (worst tenant), longest %v; "+
					"past the slice's end as %% of the slice: p99 %.1f %%, longest %.1f %%", n, over.n,
					over.p99.Round(10*time.Microsecond), over.max.Round(10*time.Microsecond), over.p99Pct, over.maxPct)
				b.ReportMetric(float64(over.p99.Microseconds())/1e3, "overrun-p99-ms")
				b.ReportMetric(float64(over.max.Microseconds())/1e3, "overrun-max-ms")
				b.ReportMetric(over.p99Pct, "overrun-p99-%slice")
				b.ReportMetric(over.maxPct, "overrun-max-%slice")
				s := r.wins.summary()
				b.ReportMetric(s.worstWork, "worst-pp-run")
				b.ReportMetric(s.worstHeld, "worst-pp-granted")
				b.ReportMetric(s.minBusy*100, "min-busy-%")
				b.ReportMetric(float64(s.clean), "windows")
				all := shareSummary{minBusy: 1}
				for _, w := range r.wins {
					all.worstWork, all.worstHeld = max(all.worstWork, w.errWork), max(all.worstHeld, w.errHeld)
					all.minBusy = min(all.minBusy, w.busy)
				}
				b.ReportMetric(all.worstHeld, "worst-pp-granted-all")
				b.ReportMetric(all.minBusy*100, "min-busy-%-all")
			}
		})
	}
}

// burstRun: an online tenant (priority high, 10 ms slices) whose requests need
// 3x its slice (60 kernels of 500 µs) every 400-600 ms, beside `offline` busy
// tenants with 10 ms slices; returns its request latencies.
func burstRun(b *testing.B, e *e2e, burst bool, offline int, secs int) []time.Duration {
	cfg := testCfg(b)
	cfg.Policy = policy.DefaultConfig()
	cfg.Policy.Burst = burst
	startDaemon(b, cfg)
	setGroup(b, cfg, "online", group.Change{File: "slice", Value: "10ms"}, group.Change{File: "priority", Value: "high"})
	specs := []tenantSpec{{"online", []string{"--mode", "requests", "--kernel-us", "500", "--n", "60",
		"--gap-ms", "400", "--jitter-ms", "200", "--seconds", strconv.Itoa(secs)}}}
	for i := range offline {
		name := fmt.Sprintf("off%d", i)
		setGroup(b, cfg, name, group.Change{File: "slice", Value: "10ms"})
		specs = append(specs, tenantSpec{name, []string{"--mode", "busy", "--kernel-us", "500", "--seconds", strconv.Itoa(secs)}})
	}
	outs := e.run(b, cfg, filepath.Join(cfg.RunDir, "sim.state"), specs, time.Now().Add(1500*time.Millisecond))
	var lat []time.Duration
	for _, l := range outs[0] {
		var ns int64
		if n, _ := fmt.Sscanf(l, "lat %d", &ns); n == 1 {
			lat = append(lat, time.Duration(ns))
		}
	}
	return lat
}

// BenchmarkE2EBurst: the burst buffer's effect on the online tenant's request
// latency among 7 busy offline tenants, with and without burst buffers, and alone.
func BenchmarkE2EBurst(b *testing.B) {
	e := setupE2E(b)
	secs := 30
	if v, err := strconv.Atoi(os.Getenv("GPUSLICE_NODE_BURST_SECS")); err == nil && v > 0 {
		secs = v
	}
	for b.Loop() {
		with := burstRun(b, e, true, 7, secs)
		without := burstRun(b, e, false, 7, secs)
		alone := burstRun(b, e, true, 0, secs)
		if testing.Verbose() {
			b.Logf("latencies with %v\nwithout %v\nalone %v", with, without, alone)
		}
		w50, w99 := percentiles(with)
		o50, o99 := percentiles(without)
		a50, a99 := percentiles(alone)
		b.Logf("online requests (3x slice) among 7 busy offline tenants: p50/p99 with burst buffers %v/%v, "+
			"without %v/%v, alone %v/%v (%d/%d/%d requests): p99 %.1fx lower with buffers, %.2fx alone",
			w50.Round(10*time.Microsecond), w99.Round(10*time.Microsecond), o50.Round(10*time.Microsecond),
			o99.Round(10*time.Microsecond), a50.Round(10*time.Microsecond), a99.Round(10*time.Microsecond),
			len(with), len(without), len(alone), float64(o99)/float64(w99), float64(w99)/float64(a99))
		b.ReportMetric(float64(w99.Microseconds())/1e3, "p99-ms-burst")
		b.ReportMetric(float64(o99.Microseconds())/1e3, "p99-ms-noburst")
		b.ReportMetric(float64(a99.Microseconds())/1e3, "p99-ms-alone")
	}
}

// BenchmarkGateLaunch: what the launch gate adds to cuLaunchKernel on the
// simulated GPU, from gs-bench-hooks (hooked vs direct calls side by side in
// one process, median ns per call, each batch queued behind a 1 ms kernel): the
// gate off; no daemon (ungated: one relaxed load); holding a grant from a
// daemon with an unbounded queue (a load, a count, a check every 256 launches),
// with the count bound (depth=4: the clock and an event per launch, and the
// wait for the kernel four launches back) and with the default bound by time
// (a check every few hundred launches: a marker event, the queue estimate);
// under 1 s slices like make bench-hooks.
func BenchmarkGateLaunch(b *testing.B) {
	e := setupE2E(b)
	bench := filepath.Join(e.bin, "gs-bench-hooks")
	if _, err := os.Stat(bench); err != nil {
		b.Skipf("needs %s (make all)", bench)
	}
	for _, tc := range []struct {
		name   string
		daemon bool
		env    []string
	}{
		{"gate=off", false, []string{"GPUSLICE_GATE=off"}},
		{"no-daemon", false, nil},
		{"held/unbounded", true, []string{"GPUSLICE_GATE_QUEUE_US=0"}},
		{"held/depth=4", true, []string{"GPUSLICE_GATE_DEPTH=4"}},
		{"held/default", true, nil},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := testCfg(b)
			// 1 s slices, as make bench-hooks: a timed batch (1 ms of
			// kernel ahead) rarely holds a hand-over, and the time bound
			// (10 % of the slice) is not what is measured.
			cfg.Policy.DefaultSlice = time.Second
			if tc.daemon {
				startDaemon(b, cfg)
			}
			for b.Loop() {
				cmd := exec.Command(bench, filepath.Join(e.bin, "libgpuslice.so"), "1000", "0")
				cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+e.sim, "GPUSLICE_LOG=0", nodestatus.EnvSocket+"="+cfg.Socket,
					"GPUSLICE_SIM_STATE="+filepath.Join(cfg.RunDir, "sim.state"))
				cmd.Env = append(cmd.Env, tc.env...)
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("%v\n%s", err, out)
				}
				var direct, hooked, added float64
				for _, l := range strings.Split(string(out), "\n") {
					if n, _ := fmt.Sscanf(l, "cuLaunchKernel direct %f ns hooked %f ns added %f ns", &direct, &hooked, &added); n == 3 {
						b.ReportMetric(direct, "direct-ns")
						b.ReportMetric(added, "added-ns")
					}
				}
				if hooked == 0 {
					b.Fatalf("no cuLaunchKernel line in %q", out)
				}
			}
		})
	}
}
