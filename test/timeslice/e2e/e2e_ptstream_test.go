//go:build timeslicee2e

// SPDX-License-Identifier: Apache-2.0

package timeslicee2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/policy"
)

// TestE2EGatePerThreadStreamCapture: a tenant holding a grant captures 300
// launches on the per-thread default stream (cuLaunchKernel_ptsz with NULL),
// as CUDA graphs capture with --default-stream per-thread. The gate's queue
// markers go on the launch's own stream and never into a capture: one on the
// legacy stream is an implicit dependency on the capturing stream, which the
// driver refuses and which invalidates the application's capture.
func TestE2EGatePerThreadStreamCapture(t *testing.T) {
	e := setupE2E(t)
	cfg := testCfg(t)
	cfg.Policy = policy.DefaultConfig()
	startDaemon(t, cfg)
	setGroup(t, cfg, "pt")
	spec := tenantSpec{"pt", []string{"--mode", "ptcapture", "--kernel-us", "20", "--n", "300"}}
	outs := e.run(t, cfg, filepath.Join(cfg.RunDir, "sim.state"), []tenantSpec{spec}, time.Now())
	got := strings.Join(outs[0], "\n")
	if got != "ptcapture CUDA_SUCCESS CUDA_SUCCESS" {
		t.Fatalf("tenant said %q: want the capture and its graph launch to succeed", got)
	}
}
