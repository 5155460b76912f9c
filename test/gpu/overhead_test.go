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

// The demo (`gpuslice demo`): five parts of four training tasks. Asserted are what
// memory and the policy decide, not how fast the machine is: (1) without isolation
// some task runs out of memory; (2), (3) and (5) every task finishes; (4) with static
// caps the larger models do not fit; in (3) the online task (high priority, 20 ms
// slices) runs more steps per second than each offline one in the same run. The
// speeds are reported.
func (s *suite) testDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out := output(t, s.cmd(ctx, "gpuslice", "demo"))
	t.Logf("gpuslice demo:\n%s", out)
	parts := demoParts(out)
	if len(parts) != 5 {
		t.Fatalf("want five demo parts, got %d:\n%s", len(parts), out)
	}
	failed := strings.Count(parts[0], "FAILED")
	if failed == 0 {
		t.Errorf("demo part (1), no isolation: no task ran out of memory")
	}
	for _, i := range []int{1, 2, 4} {
		if n := strings.Count(parts[i], "finished"); n != 4 {
			t.Errorf("demo part (%d): %d of 4 tasks finished, want all", i+1, n)
		}
	}
	capped := strings.Count(parts[3], "FAILED")
	if capped == 0 || capped == 4 {
		t.Errorf("demo part (4), static caps: %d of 4 tasks failed, want the larger models only", capped)
	}
	steps := demoSpeeds(parts[2])
	if len(steps) != 4 {
		t.Fatalf("demo part (3): %d task speeds, want 4:\n%s", len(steps), parts[2])
	}
	for i := 1; i < 4; i++ {
		if steps[0] <= steps[i] {
			t.Errorf("demo part (3): the online task ran %.1f steps/s, offline task-%d %.1f: want the online task faster", steps[0], i+1, steps[i])
		}
	}
	speed := ""
	if i := strings.Index(out, "speed with priorities"); i >= 0 {
		speed = strings.TrimSpace(strings.SplitN(out[i:], "\n", 2)[0])
	}
	s.record(t, "demo", "four training tasks (gpuslice demo)",
		fmt.Sprintf("no isolation: %d of 4 failed; limits, priorities, elastic: 4 of 4 finished; static caps: %d of 4 failed; %s", failed, capped, speed))
}

// demoParts splits the demo's output at its numbered part headings "(1) ..." to "(N) ...".
func demoParts(out string) []string {
	var parts []string
	for _, p := range strings.Split(out, "\n(")[1:] {
		if len(p) > 0 && p[0] >= '1' && p[0] <= '9' {
			parts = append(parts, p)
		}
	}
	return parts
}

// demoSpeeds reads the steps/s column of a demo part's task rows (0 where a task failed).
func demoSpeeds(part string) []float64 {
	var v []float64
	for _, l := range strings.Split(part, "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasPrefix(f[0], "task-") {
			continue
		}
		var x float64
		for i := 1; i < len(f); i++ {
			if f[i] == "finished" || f[i] == "FAILED:" {
				if _, err := fmt.Sscanf(f[i-1], "%g", &x); err != nil {
					x = 0
				}
				break
			}
		}
		v = append(v, x)
	}
	return v
}
