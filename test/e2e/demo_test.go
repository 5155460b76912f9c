package e2e

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// section returns the table rows printed under the heading that starts with prefix.
func section(out, prefix string) [][]string {
	var rows [][]string
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, prefix):
			in = true
		case in && strings.HasPrefix(line, "task-"):
			rows = append(rows, strings.Fields(line))
		case in && strings.TrimSpace(line) == "" && len(rows) > 0:
			return rows
		}
	}
	return rows
}

func TestDemoIsolationOnSimulatedGPU(t *testing.T) {
	bin := binDir(t)
	r := run(t, env(t, "GPUSLICE_DRIVER=sim"), filepath.Join(bin, "gpuslice"), "demo", "--duration", "1500ms", "--kernel-us", "1500")
	if r.code != 0 {
		t.Fatalf("demo exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("demo output:\n%s", r.stdout)
	noIso := section(r.stdout, "(1)")
	if len(noIso) != 4 || !strings.Contains(strings.Join(flatten(noIso), " "), "out of memory") {
		t.Fatalf("part (1) should show tasks failing with out of memory:\n%s", r.stdout)
	}
	// Steps/s are wall-clock rates: the bounds compare tasks of one part, which ran
	// at the same time on the same CPUs, so CPU load elsewhere moves them together.
	equal := rates(t, section(r.stdout, "(2)"))
	lo, hi := 1e9, 0.0
	for _, rate := range equal {
		lo, hi = min(lo, rate), max(hi, rate)
	}
	if hi > 2.5*lo {
		t.Errorf("part (2) equal slices: speeds differ too much: %.1f .. %.1f steps/s", lo, hi)
	}
	prio := rates(t, section(r.stdout, "(3)"))
	for i := 1; i < 4; i++ {
		if prio[0] < 1.3*prio[i] {
			t.Errorf("part (3): the high-priority task ran %.1f steps/s, not clearly faster than low-priority task-%d's %.1f",
				prio[0], i+1, prio[i])
		}
	}
}

// rates checks that every task of a limited part finished and returns their steps/s.
func rates(t *testing.T, rows [][]string) []float64 {
	t.Helper()
	if len(rows) != 4 {
		t.Fatalf("want 4 rows, got %v", rows)
	}
	var out []float64
	for _, row := range rows {
		// task, limit (2 fields), time slice (1 or 2 fields), peak (2 fields), steps/s, "finished", ...
		i := 0
		for i < len(row) && row[i] != "finished" {
			i++
		}
		if i == len(row) || i < 2 {
			t.Fatalf("task did not finish: %v", row)
		}
		rate, err := strconv.ParseFloat(row[i-1], 64)
		if err != nil {
			t.Fatalf("steps/s %q: %v", row[i-1], err)
		}
		out = append(out, rate)
	}
	return out
}

func flatten(rows [][]string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r...)
	}
	return out
}
