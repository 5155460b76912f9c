// Package demo reproduces the problem gpuslice solves on whatever GPU is
// there: several training tasks that size themselves from free GPU memory
// share one GPU, first with no isolation, then each under gpuslice limits.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Config describes one demo run.
type Config struct {
	BinDir string
	// Env is the environment every task starts from (simulator settings included).
	Env []string
	// GPUName and GPUMemory describe the GPU the tasks share.
	GPUName   string
	GPUMemory uint64
	Simulated bool
	Tasks     int
	// Steps per task, or with Duration > 0, train for that long instead.
	Steps    int
	Duration time.Duration
	Kernels  int
	KernelUS int
	Out      io.Writer
}

// Outcome is what one task reported (gs-trainer's JSON line) plus its limit.
type Outcome struct {
	Task      string  `json:"task"`
	Total     uint64  `json:"total"`
	Peak      uint64  `json:"peak"`
	Steps     int     `json:"steps"`
	Seconds   float64 `json:"seconds"`
	StepsPerS float64 `json:"steps_per_s"`
	Result    string  `json:"result"`
	Phase     string  `json:"phase"`
	Limit     uint64  `json:"-"`
	Policy    string  `json:"-"` // time-slice settings, for the table
	Stderr    string  `json:"-"`
}

// Scenario is one part of the demo: a title and how to start task i.
type Scenario struct {
	Title string
	// Command returns the argv and per-task limit (0: none) of task i.
	Command func(i int) ([]string, uint64)
	// Policy describes task i's time-slice settings ("" for none).
	Policy func(i int) string
}

// HighSlice and LowSlice are part (3)'s time slices: task-1 is online work,
// the others offline.
const (
	HighSlice = "20ms"
	LowSlice  = "200us"
)

// Scenarios are the parts of the demo, in order.
func Scenarios(c *Config) []Scenario {
	quarter := c.GPUMemory / uint64(c.Tasks)
	limited := func(i int, flags ...string) []string {
		argv := append([]string{filepath.Join(c.BinDir, "gpuslice"), "run", "--memory", strconv.FormatUint(quarter, 10)}, flags...)
		return append(append(argv, "--"), c.trainer(i)...)
	}
	return []Scenario{
		{
			Title:   "(1) no isolation: each task sizes itself from the free memory it sees",
			Command: func(i int) ([]string, uint64) { return c.trainer(i), 0 },
			Policy:  func(int) string { return "-" },
		},
		{
			Title:   fmt.Sprintf("(2) gpuslice run --memory %s each (a 1/%d share, equal time slices)", sizeGiB(quarter), c.Tasks),
			Command: func(i int) ([]string, uint64) { return limited(i), quarter },
			Policy:  func(int) string { return "equal" },
		},
		{
			Title: fmt.Sprintf("(3) as (2), task-1 online (--priority high --slice %s), the others offline (--priority low --slice %s)", HighSlice, LowSlice),
			Command: func(i int) ([]string, uint64) {
				if i == 0 {
					return limited(i, "--priority", "high", "--slice", HighSlice), quarter
				}
				return limited(i, "--priority", "low", "--slice", LowSlice), quarter
			},
			Policy: func(i int) string {
				if i == 0 {
					return HighSlice + " high"
				}
				return LowSlice + " low"
			},
		},
	}
}

// ElasticScenarios are the elastic memory parts: models of different sizes
// (NeedOf), which together fit the GPU, each guaranteed 1/(2 x tasks) of it:
// (4) capped there, (5) with ceilings of 3/4 of the GPU (borrowed while free).
func ElasticScenarios(c *Config) []Scenario {
	small := c.GPUMemory / uint64(2*c.Tasks)
	ceiling := c.GPUMemory / 4 * 3
	run := func(i int, flags ...string) []string {
		argv := append([]string{filepath.Join(c.BinDir, "gpuslice"), "run", "--memory", strconv.FormatUint(small, 10)}, flags...)
		return append(append(append(argv, "--"), c.trainer(i)...), "--need", strconv.FormatUint(c.NeedOf(i), 10))
	}
	return []Scenario{
		{
			Title:   fmt.Sprintf("(4) models of different sizes, static caps: gpuslice run --memory %s each", sizeGiB(small)),
			Command: func(i int) ([]string, uint64) { return run(i), small },
			Policy:  func(int) string { return "equal" },
		},
		{
			Title: fmt.Sprintf("(5) the same with elastic memory: --memory %s --memory-max %s (borrowed from the node daemon while free)",
				sizeGiB(small), sizeGiB(ceiling)),
			Command: func(i int) ([]string, uint64) {
				return run(i, "--memory-max", strconv.FormatUint(ceiling, 10)), ceiling
			},
			Policy: func(int) string { return "equal" },
		},
	}
}

// NeedOf is task i's model size in the elastic parts: shares 1, 2, 3, ... of
// 85 % of the GPU, so together they fit and the larger ones pass a static cap.
func (c *Config) NeedOf(i int) uint64 {
	parts := uint64(c.Tasks * (c.Tasks + 1) / 2)
	return c.GPUMemory / 100 * 85 / parts * uint64(i+1)
}

func (c *Config) trainer(i int) []string {
	return []string{
		filepath.Join(c.BinDir, "gs-trainer"), "--name", fmt.Sprintf("task-%d", i+1),
		"--init-ms", "500", "--steps", strconv.Itoa(c.Steps), "--duration-ms", strconv.FormatInt(c.Duration.Milliseconds(), 10), "--kernels", strconv.Itoa(c.Kernels), "--kernel-us", strconv.Itoa(c.KernelUS),
	}
}

// Run plays every scenario and prints a table for each.
func Run(ctx context.Context, c *Config) ([][]Outcome, error) {
	kind := "real"
	if c.Simulated {
		kind = "simulated"
	}
	fmt.Fprintf(c.Out, "gpuslice demo: %d training tasks share one GPU (%s, %s, %s)\n", c.Tasks, c.GPUName, sizeGiB(c.GPUMemory), kind)
	var all [][]Outcome
	for _, s := range append(Scenarios(c), ElasticScenarios(c)...) {
		outs, err := RunScenario(ctx, c, s)
		if err != nil {
			return all, fmt.Errorf("%s: %w", s.Title, err)
		}
		fmt.Fprintf(c.Out, "\n%s\n", s.Title)
		if err := WriteTable(c.Out, outs); err != nil {
			return all, err
		}
		all = append(all, outs)
	}
	if len(all) >= 3 {
		fmt.Fprintf(c.Out, "\n%s\n", Compare(all[1], all[2]))
	}
	return all, nil
}

// RunScenario starts every task at once and collects their outcomes.
func RunScenario(ctx context.Context, c *Config, s Scenario) ([]Outcome, error) {
	outs := make([]Outcome, c.Tasks)
	errs := make([]error, c.Tasks)
	var wg sync.WaitGroup
	for i := 0; i < c.Tasks; i++ {
		argv, limit := s.Command(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = runTask(ctx, c.Env, argv)
			outs[i].Limit, outs[i].Policy = limit, s.Policy(i)
		}()
	}
	wg.Wait()
	return outs, errors.Join(errs...)
}

func runTask(ctx context.Context, env []string, argv []string) (Outcome, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
	runErr := cmd.Run()
	var out Outcome
	line := bytes.TrimSpace(stdout.Bytes())
	if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal(line, &out); err != nil {
		return Outcome{}, fmt.Errorf("task %v gave no result (%w): %w; stderr: %s", argv, runErr, err, stderr.String())
	}
	out.Stderr = stderr.String()
	return out, nil
}
