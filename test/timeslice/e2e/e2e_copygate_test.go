//go:build timeslicee2e

// SPDX-License-Identifier: Apache-2.0

package timeslicee2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/policy"
)

// copyShare runs an online tenant launching 500 µs kernels back to back beside
// an offline copy-only tenant capped at 10 % of the GPU (share.max; 500 µs
// memsets of device memory, nothing else) for secs seconds, both under
// preload, and returns the copy-only tenant's part of the engine time in the
// full windows: copies / (copies + kernels), each item holding the simulated
// GPU's engine for the same 500 µs. The online tenant wants the GPU all the
// time, so whatever the copier gets past its 10 % comes out of the online
// tenant's slices.
func copyShare(t testing.TB, e *e2e, preload string, secs int) (share float64, kernels, copies int) {
	t.Helper()
	cfg := testCfg(t)
	cfg.Policy = policy.DefaultConfig()
	startDaemon(t, cfg)
	setGroup(t, cfg, "online", group.Change{File: group.FilePriority, Value: "high"})
	setGroup(t, cfg, "copier", group.Change{File: group.FilePriority, Value: "low"},
		group.Change{File: group.FileShareMax, Value: "10%"})
	run := *e
	run.preload = preload
	s := strconv.Itoa(secs)
	outs := run.run(t, cfg, filepath.Join(cfg.RunDir, "sim.state"), []tenantSpec{
		{"online", []string{"--mode", "busy", "--kernel-us", "500", "--seconds", s}},
		{"copier", []string{"--mode", "copy", "--kernel-us", "500", "--seconds", s}},
	}, time.Now().Add(time.Second))
	wk, wc := windows(outs[0]), windows(outs[1])
	for w := 1; w < secs; w++ { // the first window holds the start-up
		kernels += wk[w].kernels
		copies += wc[w].kernels
	}
	if kernels+copies == 0 {
		t.Fatalf("no work ran: online %v, copier %v", outs[0], outs[1])
	}
	return float64(copies) / float64(kernels+copies), kernels, copies
}

// TestE2ECopyOnlyTenantGated: engine work that is not a kernel (here device
// memsets) waits for grants like kernels do, so a copy-only tenant is held to
// its 10 % ceiling; ungated, the engine's FIFO gave it half of the GPU, the
// online tenant's slices included (51.5 % measured with the library before).
func TestE2ECopyOnlyTenantGated(t *testing.T) {
	e := setupE2E(t)
	t.Setenv("GPUSLICE_SIM_COPY_GBPS", "1") // a 500 KB memset holds the engine 500 µs
	share, kernels, copies := copyShare(t, e, e.preload, 3)
	t.Logf("copy-only offline tenant: %.1f%% of the engine (%d kernels, %d copies)", 100*share, kernels, copies)
	if share > 0.2 {
		t.Fatalf("the copy-only tenant capped at 10%% took %.1f%% of the engine beside a busy online tenant: want at most 20%%", 100*share)
	}
}

// BenchmarkCopyOnlyTenant (make bench-copy-gate): the copy-only tenant's
// part of the engine with the library under test and, side by side, with the
// one in GPUSLICE_BENCH_BASE_PRELOAD (a build before engine work was gated).
func BenchmarkCopyOnlyTenant(b *testing.B) {
	e := setupE2E(b)
	b.Setenv("GPUSLICE_SIM_COPY_GBPS", "1")
	libs := [][2]string{{"new", e.preload}}
	if base := os.Getenv("GPUSLICE_BENCH_BASE_PRELOAD"); base != "" {
		libs = append([][2]string{{"old", base}}, libs...)
	}
	for range b.N {
		for _, l := range libs {
			share, kernels, copies := copyShare(b, e, l[1], 4)
			fmt.Printf("copy-only tenant (share.max 10%%) beside a busy online one, %s library: %.1f%% of the engine "+
				"(%d kernels, %d memsets of 500 us in 3 s)\n", l[0], 100*share, kernels, copies)
		}
	}
}
