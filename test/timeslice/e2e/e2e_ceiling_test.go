//go:build timeslicee2e

package timeslicee2e

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/internal/timeslice"
)

// A ceiling end to end: one busy tenant alone on the simulated GPU in a group
// with share.max set.

// ceilingRun is what a capped tenant got between the status samples at 1 s
// and at the end, as fractions of the daemon's time (status.json): the GPU
// time the daemon granted it (held from each grant to its hand-over, what the
// ceiling charges: gpuTimeNs), the sum of its grants' lengths (grantedNs);
// and, on the tenant's clock over the same seconds, the kernel time it ran on
// the simulated GPU.
type ceilingRun struct {
	held, lengths, ran float64
	span               time.Duration
}

func (r ceilingRun) String() string {
	return fmt.Sprintf("GPU time granted %.1f%% (grant lengths %.1f%%), kernels run on the simulated GPU %.1f%% (over %v)",
		r.held*100, r.lengths*100, r.ran*100, r.span.Round(time.Millisecond))
}

// ceilingSample is the capped group's status at one instant.
type ceilingSample struct {
	at            time.Time
	held, lengths int64
	ok            bool
}

func sampleCeiling(cfg timeslice.Config, name string) ceilingSample {
	st, err := nodestatus.Read(cfg.RunDir)
	if err != nil {
		return ceilingSample{}
	}
	for _, g := range st.GPUs {
		for _, gr := range g.Groups {
			if gr.Group == name {
				return ceilingSample{at: st.Time, held: gr.AchievedNs, lengths: gr.GrantedNs, ok: true}
			}
		}
	}
	return ceilingSample{}
}

// runCeiling runs one busy tenant (kernelUS µs kernels, default slices) in a
// group with share.max=shareMax for secs seconds, alone on the simulated GPU.
func runCeiling(t testing.TB, e *e2e, shareMax string, kernelUS, secs int) ceilingRun {
	cfg := testCfg(t)
	cfg.Policy = policy.DefaultConfig()
	startDaemon(t, cfg)
	setGroup(t, cfg, "capped", group.Change{File: group.FileShareMax, Value: shareMax})
	t0 := time.Now().Add(1500 * time.Millisecond)
	samples := make(chan [2]ceilingSample, 1)
	go func() {
		var s [2]ceilingSample
		for i, k := range []int{1, secs} {
			time.Sleep(time.Until(t0.Add(time.Duration(k) * time.Second)))
			s[i] = sampleCeiling(cfg, "capped")
		}
		samples <- s
	}()
	spec := tenantSpec{"capped", []string{"--mode", "busy", "--kernel-us", strconv.Itoa(kernelUS), "--seconds", strconv.Itoa(secs)}}
	outs := e.run(t, cfg, filepath.Join(cfg.RunDir, "sim.state"), []tenantSpec{spec}, t0)
	s := <-samples
	if !s[0].ok || !s[1].ok || !s[1].at.After(s[0].at) {
		t.Fatalf("no status samples of the group: %+v", s)
	}
	wins := windows(outs[0])
	var kernels int
	for w := 1; w < secs; w++ { // the same seconds as the samples, on the tenant's clock
		kernels += wins[w].kernels
	}
	span := s[1].at.Sub(s[0].at)
	return ceilingRun{
		held:    float64(s[1].held-s[0].held) / float64(span),
		lengths: float64(s[1].lengths-s[0].lengths) / float64(span),
		ran:     float64(time.Duration(kernels)*time.Duration(kernelUS)*time.Microsecond) / float64(time.Duration(secs-1)*time.Second),
		span:    span,
	}
}

// TestE2ECeiling: a busy tenant alone on the simulated GPU with share.max=40%
// (one run of 5 s, no retry):
//   - holds the GPU at most 43% of the time by the daemon's books (the time
//     it held the GPU, hand-overs included: what the ceiling charges), runs
//     at most 43% of the time on the simulated GPU, and its grants add up to
//     at most 43%: the GPU idles rather than exceed the ceiling.
//
// A tenant starved of CPU asks later, runs fewer kernels and hands over later
// (shorter grants after the overdraft), which only lowers these figures (35%
// granted under ASan on the loaded CI machine), so only the ceiling is
// asserted here; that the tenant gets the whole 40% is the policy model's
// (TestSimCeiling, 40% +-0.16 pp) and, on an unloaded machine,
// BenchmarkE2ECeiling's (make bench-node).
func TestE2ECeiling(t *testing.T) {
	e := setupE2E(t)
	r := runCeiling(t, e, "40%", 200, 5)
	t.Logf("share.max 40%%, alone: %v", r)
	if r.held <= 0 || r.held > 0.43 {
		t.Errorf("share.max 40%%, alone: granted %.1f%% of the GPU's time, want (0, 43%%]", r.held*100)
	}
	if r.ran <= 0 || r.ran > 0.43 || r.lengths > 0.43 {
		t.Errorf("share.max 40%%, alone: ran %.1f%% of the time on the simulated GPU, grants of %.1f%%: want (0, 43%%]",
			r.ran*100, r.lengths*100)
	}
}

// BenchmarkE2ECeiling: the same, 6 s; prints the line
// `share.max 40%: alone <granted>% granted, <ran>% run on the GPU` (target 40% +-3 pp).
func BenchmarkE2ECeiling(b *testing.B) {
	e := setupE2E(b)
	for b.Loop() {
		r := runCeiling(b, e, "40%", 200, 6)
		b.Logf("share.max 40%%: alone %.1f%% granted, %.1f%% run on the GPU (grant lengths %.1f%%; target 40%% +-3 pp)",
			r.held*100, r.ran*100, r.lengths*100)
		b.ReportMetric(r.held*100, "granted-%")
		b.ReportMetric(r.ran*100, "run-%")
	}
}
