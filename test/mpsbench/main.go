// Command mpsbench compares the two GPU sharing modes side by side in one run
// (`make bench-mps`): a latency-sensitive tenant with small kernels beside
// three busy tenants, under gpuslice's time slices (time-slice daemon + libgpuslice
// gate) and under MPS (the MPS control daemon, every tenant at 25 % active
// threads, libgpuslice's gate off); then two busy MPS clients at 30 % and
// 70 %. On a machine without an NVIDIA driver it runs on the simulated GPU
// and its stand-in MPS daemon. The last line is a contract:
//
//	mps shares 30/70: <a>% / <b>%, small-kernel p99 timeslice <x> ms vs mps <y> ms
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

type result struct {
	Name    string  `json:"name"`
	Kernels int     `json:"kernels"`
	WorkMS  float64 `json:"work_ms"`
	Seconds float64 `json:"seconds"`
	P50MS   float64 `json:"p50_ms"`
	P99MS   float64 `json:"p99_ms"`
}

type tenant struct {
	name      string
	kernelUS  int
	gapUS     int
	pct       int // MPS active thread percentage
	extraArgs []string
}

type config struct {
	bin, mpsControl, simDir string
	seconds                 float64
	env                     []string
}

func main() {
	var c config
	flag.StringVar(&c.bin, "bin", "bin", "directory of gpuslice, gs-share-tenant and libgpuslice.so")
	flag.StringVar(&c.mpsControl, "mps-control", "", "MPS control daemon (default: nvidia-cuda-mps-control with a driver, else bin/sim/gpuslice-sim-mps-control)")
	flag.Float64Var(&c.seconds, "seconds", 4, "seconds each phase runs")
	flag.Parse()
	if err := run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "mpsbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	tmp, err := os.MkdirTemp("", "gpuslice-mpsbench-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	c.bin, err = filepath.Abs(c.bin)
	if err != nil {
		return fmt.Errorf("bin dir: %w", err)
	}
	c.env = append(os.Environ(), "GPUSLICE_SIM_STATE="+filepath.Join("/dev/shm", filepath.Base(tmp)), "GPUSLICE_LOG=0")
	defer os.Remove(filepath.Join("/dev/shm", filepath.Base(tmp)))
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libcuda.so.1"); err != nil {
		c.simDir = filepath.Join(c.bin, "sim")
		c.env = append(c.env, "LD_LIBRARY_PATH="+c.simDir)
		fmt.Printf("no NVIDIA driver: simulated GPU (%s) and its stand-in MPS daemon\n", c.simDir)
	}
	if c.mpsControl == "" {
		c.mpsControl = "nvidia-cuda-mps-control"
		if c.simDir != "" {
			c.mpsControl = filepath.Join(c.simDir, "gpuslice-sim-mps-control")
		}
	}
	mix := []tenant{
		{name: "small", kernelUS: 200, gapUS: 5000, pct: 25},
		{name: "busy1", kernelUS: 10000, pct: 25},
		{name: "busy2", kernelUS: 10000, pct: 25},
		{name: "busy3", kernelUS: 10000, pct: 25},
	}
	ts, err := timeslice(ctx, c, filepath.Join(tmp, "ts"), mix)
	if err != nil {
		return fmt.Errorf("timeslice: %w", err)
	}
	mps, err := withMPS(ctx, c, filepath.Join(tmp, "mps"), mix)
	if err != nil {
		return fmt.Errorf("mps: %w", err)
	}
	shares, err := withMPS(ctx, c, filepath.Join(tmp, "shares"), []tenant{
		{name: "share30", kernelUS: 100000, pct: 30},
		{name: "share70", kernelUS: 100000, pct: 70},
	})
	if err != nil {
		return fmt.Errorf("mps shares: %w", err)
	}
	fmt.Printf("one small-kernel tenant (200 us kernels, 5 ms apart) beside three busy tenants (10 ms kernels), %.0f s each:\n", c.seconds)
	fmt.Printf("%-10s %14s %14s %16s %18s\n", "mode", "small p50 ms", "small p99 ms", "small kernels/s", "total throughput")
	for _, m := range []struct {
		name string
		rs   []result
	}{{"timeslice", ts}, {"mps", mps}} {
		fmt.Printf("%-10s %14.2f %14.2f %16.0f %17.1f%%\n", m.name, m.rs[0].P50MS, m.rs[0].P99MS,
			float64(m.rs[0].Kernels)/m.rs[0].Seconds, 100*throughput(m.rs))
	}
	a, b := 100*shares[0].WorkMS/1e3/shares[0].Seconds, 100*shares[1].WorkMS/1e3/shares[1].Seconds
	fmt.Printf("two busy MPS clients at 30 %% and 70 %% active threads at once: %.1f%% and %.1f%% of the GPU\n", a, b)
	fmt.Printf("mps shares 30/70: %.1f%% / %.1f%%, small-kernel p99 timeslice %.2f ms vs mps %.2f ms\n", a, b, ts[0].P99MS, mps[0].P99MS)
	return nil
}

// throughput: GPU work done by all tenants per second of the phase.
func throughput(rs []result) float64 {
	var work, secs float64
	for _, r := range rs {
		work += r.WorkMS / 1e3
		secs = max(secs, r.Seconds)
	}
	return work / secs
}

func timeslice(ctx context.Context, c config, dir string, mix []tenant) ([]result, error) {
	env := append(c.env[:len(c.env):len(c.env)], "GPUSLICE_RUN_DIR="+dir)
	daemon := exec.CommandContext(ctx, filepath.Join(c.bin, "gpuslice"), "node")
	daemon.Env = env
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("run dir: %w", err)
	}
	if err := daemon.Start(); err != nil {
		return nil, fmt.Errorf("node daemon: %w", err)
	}
	defer stop(daemon)
	if err := waitFor(filepath.Join(dir, "node.sock")); err != nil {
		return nil, err
	}
	return runTenants(ctx, c, env, mix, func(t tenant) []string {
		return append([]string{filepath.Join(c.bin, "gpuslice"), "run", "--"}, tenantArgs(c, t)...)
	})
}

func withMPS(ctx context.Context, c config, dir string, mix []tenant) ([]result, error) {
	env := append(c.env[:len(c.env):len(c.env)], "CUDA_MPS_PIPE_DIRECTORY="+filepath.Join(dir, "pipe"),
		"CUDA_MPS_LOG_DIRECTORY="+filepath.Join(dir, "log"))
	daemon := exec.CommandContext(ctx, c.mpsControl, "-f")
	daemon.Env = env
	if err := daemon.Start(); err != nil {
		return nil, fmt.Errorf("MPS control daemon %s: %w", c.mpsControl, err)
	}
	defer quitMPS(c, env, daemon)
	if c.simDir != "" {
		if err := waitFor(filepath.Join(dir, "pipe", "gpuslice-sim-mps.sock")); err != nil {
			return nil, err
		}
	} else if err := waitFor(filepath.Join(dir, "pipe", "control")); err != nil {
		return nil, err
	}
	return runTenants(ctx, c, env, mix, func(t tenant) []string { return tenantArgs(c, t) })
}

func tenantArgs(c config, t tenant) []string {
	args := []string{filepath.Join(c.bin, "gs-share-tenant"), "--name", t.name, "--kernel-us", fmt.Sprint(t.kernelUS),
		"--seconds", fmt.Sprint(c.seconds)}
	if t.gapUS > 0 {
		args = append(args, "--gap-us", fmt.Sprint(t.gapUS))
	}
	return append(args, t.extraArgs...)
}

func runTenants(ctx context.Context, c config, env []string, mix []tenant, argv func(tenant) []string) ([]result, error) {
	cmds := make([]*exec.Cmd, len(mix))
	outs := make([]*bytes.Buffer, len(mix))
	for i, t := range mix {
		a := argv(t)
		cmds[i] = exec.CommandContext(ctx, a[0], a[1:]...)
		outs[i] = &bytes.Buffer{}
		cmds[i].Stdout, cmds[i].Stderr = outs[i], os.Stderr
		cmds[i].Env = append(env[:len(env):len(env)], "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+fmt.Sprint(t.pct),
			"LD_PRELOAD="+filepath.Join(c.bin, "libgpuslice.so"), "GPUSLICE_GATE="+gate(argv(t)[0], c))
		if err := cmds[i].Start(); err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	rs := make([]result, len(mix))
	var errs []error
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", mix[i].name, err))
			continue
		}
		if err := json.Unmarshal(bytes.TrimSpace(outs[i].Bytes()), &rs[i]); err != nil {
			errs = append(errs, fmt.Errorf("%s: output %q: %w", mix[i].name, outs[i].String(), err))
		}
	}
	return rs, errors.Join(errs...)
}

// gate: libgpuslice's time-slice gate is on under gpuslice run and off for
// MPS clients (what the node agent sets in each mode).
func gate(prog string, c config) string {
	if prog == filepath.Join(c.bin, "gpuslice") {
		return "on"
	}
	return "off"
}

func waitFor(path string) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			time.Sleep(50 * time.Millisecond)
			return nil
		}
	}
	return fmt.Errorf("%s did not appear in 10 s", path)
}

func stop(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(os.Interrupt)
	_ = cmd.Wait()
}

func quitMPS(c config, env []string, daemon *exec.Cmd) {
	q := exec.Command(c.mpsControl)
	q.Env = env
	q.Stdin = strings.NewReader("quit\n")
	if err := q.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "mpsbench: quit MPS daemon:", err)
		_ = daemon.Process.Kill()
	}
	_ = daemon.Wait()
}
