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
	r := run(t, env(t, "GPUSLICE_DRIVER=sim"), filepath.Join(bin, "gpuslice"), "demo", "--steps", "12", "--kernel-us", "1500")
	if r.code != 0 {
		t.Fatalf("demo exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("demo output:\n%s", r.stdout)
	noIso := section(r.stdout, "(1)")
	if len(noIso) != 4 || !strings.Contains(strings.Join(flatten(noIso), " "), "out of memory") {
		t.Fatalf("part (1) should show tasks failing with out of memory:\n%s", r.stdout)
	}
	limited := section(r.stdout, "(2)")
	if len(limited) != 4 {
		t.Fatalf("part (2) has %d rows:\n%s", len(limited), r.stdout)
	}
	lo, hi := 1e9, 0.0
	for _, row := range limited {
		// task, limit (2 fields), peak (2 fields), steps/s, result...
		if len(row) < 7 || row[6] != "finished" {
			t.Fatalf("part (2) task did not finish: %v", row)
		}
		rate, err := strconv.ParseFloat(row[5], 64)
		if err != nil {
			t.Fatalf("steps/s %q: %v", row[5], err)
		}
		lo, hi = min(lo, rate), max(hi, rate)
	}
	if hi > 1.6*lo {
		t.Errorf("part (2) speeds differ too much: %.1f .. %.1f steps/s", lo, hi)
	}
}

func flatten(rows [][]string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r...)
	}
	return out
}
