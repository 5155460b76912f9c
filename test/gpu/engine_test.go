//go:build gpusuite

package gpu

import (
	"fmt"
	"strings"
	"testing"
)

const (
	copyBytes   = 750000000 // each memset of the copy-only tenant: about 500 us of an H100's HBM (and of the simulator's default 1500 GB/s)
	copySeconds = 5         // each run; the first and last windows are not counted
)

func (s *suite) testEngine(t *testing.T) {
	t.Run("CopiesGated", s.testCopiesGated)
	t.Run("PerThreadCapture", s.testPerThreadCapture)
}

// Check 3: engine work that is not a kernel waits for grants. A copy-only
// tenant (device memsets back to back, nothing else) is measured alone, then
// capped at 10 % (--share-max) and offline beside a busy online tenant: the
// memsets it runs there over those it ran alone is its part of the GPU
// (ungated, the engine's own scheduling gave it about half).
func (s *suite) testCopiesGated(t *testing.T) {
	copier := []string{"--mode", "copy", "--kernel-us", "500", "--copy-bytes", fmt.Sprint(copyBytes)}
	alone := s.runTenants(t, copySeconds, []tenant{{flags: []string{"--group", "copy-alone"}, args: copier}})
	both := s.runTenants(t, copySeconds, []tenant{
		{flags: []string{"--group", "online", "--priority", "high"},
			args: []string{"--mode", "busy", "--kernel-us", "500"}},
		{flags: []string{"--group", "copier", "--priority", "low", "--share-max", "10%"}, args: copier},
	})
	solo, beside := kernels(alone[0], copySeconds), kernels(both[1], copySeconds)
	if solo == 0 {
		t.Fatalf("the copy-only tenant ran no memsets alone: %v", alone[0])
	}
	part := 100 * beside / solo
	if part > 30 {
		t.Errorf("the copy-only tenant capped at 10%% ran %.1f%% of the memsets it runs alone beside a busy online tenant: want at most 30%%", part)
	}
	s.record(t, "engine", "copy-only tenant (share.max 10%) beside a busy online one",
		fmt.Sprintf("%.1f%% of its memsets alone (%.0f of %.0f)", part, beside, solo))
}

// Check 4: a tenant holding grants captures 300 launches on the per-thread
// default stream (cuLaunchKernel_ptsz with NULL), then runs the graph: the
// gate's markers go on the launch's own stream and never into the capture, so
// the capture is not invalidated.
func (s *suite) testPerThreadCapture(t *testing.T) {
	out := s.runTenants(t, 1, []tenant{{flags: []string{"--group", "ptcapture"},
		args: []string{"--mode", "ptcapture", "--kernel-us", "20", "--n", "300"}}})
	got := strings.Join(out[0], " ")
	if got != "ptcapture CUDA_SUCCESS CUDA_SUCCESS" {
		t.Errorf("per-thread stream capture under the gate: tenant said %q, want the capture and its graph to succeed", got)
	}
	s.record(t, "engine", "300 launches captured on the per-thread stream under a grant", got)
}
