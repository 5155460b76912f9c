//go:build gpusuite

package gpu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// testMPS runs `make bench-mps`'s program (test/mpsbench): two MPS clients at 30 %
// and 70 %, and a small-kernel tenant beside three busy ones under time slices and
// under MPS, side by side; its last line is the summary.
func (s *suite) testMPS(t *testing.T) {
	if _, err := os.Stat(filepath.Join("..", "mpsbench")); err != nil {
		t.Skip("MPS: this tree has no MPS benchmark (test/mpsbench)")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("MPS: no Go toolchain on this machine to run test/mpsbench (a lent device machine has none)")
	}
	c := s.cmd(t.Context(), "go", "run", "./test/mpsbench", "--bin", s.bin)
	c.Dir = filepath.Join("..", "..")
	out := output(t, c)
	t.Logf("bench-mps:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	s.record(t, "mps", "time slices vs MPS (make bench-mps)", lines[len(lines)-1])
}

// report prints the summary table and writes it as Markdown: docs/benchmarks-gpu.md on
// a real driver, build/benchmarks-gpu-sim.md on the simulator (GPUSLICE_GPU_REPORT overrides).
func (s *suite) report(t *testing.T) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\ngpuslice real-GPU suite: %s (%s), driver %s%s\n", s.device, s.memory, s.driver, map[bool]string{true: " (simulated GPU)"}[s.sim])
	fmt.Fprintln(tw, "area\tcheck\tresult\tok")
	var md strings.Builder
	fmt.Fprintf(&md, "# gpuslice on %s\n\nProduced by `make test-gpu` (test/gpu) on %s.\n\n", s.device, time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&md, "- device: %s, %s\n- driver: %s\n- simulated: %v\n\n", s.device, s.memory, s.driver, s.sim)
	md.WriteString("| area | check | result | ok |\n|---|---|---|---|\n")
	for _, r := range s.rows {
		ok := map[bool]string{true: "yes", false: "NO"}[r.ok]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.area, r.check, r.figure, ok)
		fmt.Fprintf(&md, "| %s | %s | %s | %s |\n", r.area, r.check, strings.ReplaceAll(r.figure, "|", "/"), ok)
	}
	if err := tw.Flush(); err != nil {
		t.Error(err)
	}
	path := os.Getenv("GPUSLICE_GPU_REPORT")
	if path == "" {
		path = filepath.Join("..", "..", "docs", "benchmarks-gpu.md")
		if s.sim {
			path = filepath.Join("..", "..", "build", "benchmarks-gpu-sim.md")
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(md.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("report written to %s", path)
}
