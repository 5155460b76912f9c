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
	Steps     int
	Kernels   int
	KernelUS  int
	Out       io.Writer
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
	Stderr    string  `json:"-"`
}

// Scenario is one part of the demo: a title and how to start task i.
type Scenario struct {
	Title string
	// Command returns the argv and per-task limit (0: none) of task i.
	Command func(i int) ([]string, uint64)
}

// Scenarios are the parts of the demo, in order. Part (3), time slices with
// priorities, joins when the node time-slice scheduler lands.
func Scenarios(c *Config) []Scenario {
	quarter := c.GPUMemory / uint64(c.Tasks)
	return []Scenario{
		{
			Title:   "(1) no isolation: each task sizes itself from the free memory it sees",
			Command: func(i int) ([]string, uint64) { return c.trainer(i), 0 },
		},
		{
			Title: fmt.Sprintf("(2) gpuslice run --memory %s each (a 1/%d share)", sizeGiB(quarter), c.Tasks),
			Command: func(i int) ([]string, uint64) {
				argv := append([]string{filepath.Join(c.BinDir, "gpuslice"), "run", "--memory", strconv.FormatUint(quarter, 10), "--"}, c.trainer(i)...)
				return argv, quarter
			},
		},
	}
}

func (c *Config) trainer(i int) []string {
	return []string{
		filepath.Join(c.BinDir, "gs-trainer"), "--name", fmt.Sprintf("task-%d", i+1),
		"--init-ms", "500", "--steps", strconv.Itoa(c.Steps), "--kernels", strconv.Itoa(c.Kernels), "--kernel-us", strconv.Itoa(c.KernelUS),
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
	for _, s := range Scenarios(c) {
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
	fmt.Fprintf(c.Out, "\n(3) time slices with priorities: coming with the node time-slice scheduler\n")
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
			outs[i].Limit = limit
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
		return Outcome{}, fmt.Errorf("task %v gave no result (%v): %w; stderr: %s", argv, runErr, err, stderr.String())
	}
	out.Stderr = stderr.String()
	return out, nil
}
