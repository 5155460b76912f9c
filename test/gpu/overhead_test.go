//go:build gpusuite

package gpu

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The per-call costs and the launch-bound throughput, hooked vs direct, as
// `make bench-hooks` measures them (side by side in one run); its last line is the summary.
func (s *suite) testOverhead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out := output(t, s.cmd(ctx, "gs-bench-hooks", filepath.Join(s.bin, "libgpuslice.so"), "2000"))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	t.Logf("gs-bench-hooks:\n%s", out)
	var launch, through, alloc float64
	if n, _ := fmt.Sscanf(last, "launch x%f (default gate, grant held), launch-bound throughput x%f, alloc+free x%f",
		&launch, &through, &alloc); n == 3 {
		s.record(t, "overhead", "hooked / direct (make bench-hooks)",
			fmt.Sprintf("cuLaunchKernel x%.2f, launch-bound throughput x%.2f, cuMemAlloc+Free x%.2f", launch, through, alloc))
		return
	}
	s.record(t, "overhead", "hooked / direct (make bench-hooks)", last)
}

// The seed-style demo: four training tasks, no isolation / limits / priorities.
func (s *suite) testDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out := output(t, s.cmd(ctx, "gpuslice", "demo"))
	t.Logf("gpuslice demo:\n%s", out)
	parts := strings.Split(out, "\n(")
	if len(parts) != 4 {
		t.Fatalf("want three demo parts, got:\n%s", out)
	}
	failed := strings.Count(parts[1], "FAILED")
	for i, p := range parts[2:] {
		if n := strings.Count(p, "finished"); n != 4 {
			t.Errorf("demo part (%d): %d of 4 tasks finished, want all", i+2, n)
		}
	}
	speed := ""
	if i := strings.Index(out, "speed with priorities"); i >= 0 {
		speed = strings.TrimSpace(strings.SplitN(out[i:], "\n", 2)[0])
	}
	s.record(t, "demo", "four training tasks (gpuslice demo)",
		fmt.Sprintf("no isolation: %d of 4 failed; with limits: 4 of 4 finished; %s", failed, speed))
}
