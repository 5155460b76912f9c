package mps

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// RealControl is the MPS control daemon of the NVIDIA driver.
const RealControl = "nvidia-cuda-mps-control"

// Daemon is one supervised MPS control daemon: for one GPU (its UUID in
// CUDA_VISIBLE_DEVICES) with its own pipe and log directories.
type Daemon struct {
	// Binary is the control daemon: RealControl on a real driver, the
	// simulator's stand-in on the simulated GPU (any program with the same
	// command line: -f, and commands on stdin).
	Binary string
	// UUID is the GPU the daemon serves.
	UUID string
	// PipeDir, LogDir: CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY.
	PipeDir, LogDir string
	// Env is the daemon's base environment (the agent's).
	Env    []string
	Policy Policy
	// QuitTimeout bounds a clean shutdown before the daemon is killed.
	QuitTimeout time.Duration

	starts atomic.Int64
}

// Starts is how many times the daemon was started.
func (d *Daemon) Starts() int64 { return d.starts.Load() }

func (d *Daemon) env() []string {
	return append(d.Env[:len(d.Env):len(d.Env)], "CUDA_VISIBLE_DEVICES="+d.UUID,
		"CUDA_MPS_PIPE_DIRECTORY="+d.PipeDir, "CUDA_MPS_LOG_DIRECTORY="+d.LogDir)
}

// Run keeps the daemon running until ctx ends, restarting it after every
// exit with the policy's backoff, then stops it with `quit` (killing it
// after QuitTimeout).
func (d *Daemon) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithValues("gpu", d.UUID, "pipeDir", d.PipeDir)
	for _, dir := range []string{d.PipeDir, d.LogDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("MPS directory: %w", err)
		}
	}
	b := NewBackoff(d.Policy)
	for {
		cmd := exec.Command(d.Binary, "-f")
		cmd.Env = d.env()
		start := time.Now()
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start MPS control daemon %s: %w", d.Binary, err)
		}
		d.starts.Add(1)
		log.Info("MPS control daemon started", "pid", cmd.Process.Pid)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-ctx.Done():
			d.stop(log, cmd, done)
			log.Info("MPS control daemon stopped")
			return nil
		case err := <-done:
			wait := b.Exited(start, time.Now())
			log.Error(err, "MPS control daemon exited; restarting", "after", wait, "failuresInARow", b.Failures())
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
	}
}

func (d *Daemon) stop(log klog.Logger, cmd *exec.Cmd, done <-chan error) {
	qctx, cancel := context.WithTimeout(context.Background(), d.QuitTimeout)
	defer cancel()
	if _, err := d.Command(qctx, "quit"); err == nil {
		select {
		case err := <-done:
			log.V(1).Info("MPS control daemon quit", "exit", err)
			return
		case <-qctx.Done():
		}
	}
	_ = cmd.Process.Kill()
	log.V(1).Info("MPS control daemon killed", "exit", <-done)
}

// Command sends one command to the daemon (`echo CMD | <binary>`) and
// returns its output.
func (d *Daemon) Command(ctx context.Context, command string) (string, error) {
	cmd := exec.CommandContext(ctx, d.Binary)
	cmd.Env = d.env()
	cmd.Stdin = strings.NewReader(command + "\n")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("MPS control %q: %w: %s", command, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Servers lists the pids of the daemon's MPS servers (get_server_list).
func (d *Daemon) Servers(ctx context.Context) ([]int, error) {
	out, err := d.Command(ctx, "get_server_list")
	if err != nil {
		return nil, err
	}
	return pids(out), nil
}

// Clients counts the live clients of the daemon's servers
// (get_server_list, then get_client_list of each).
func (d *Daemon) Clients(ctx context.Context) (int, error) {
	servers, err := d.Servers(ctx)
	if err != nil {
		return 0, err
	}
	return d.ClientsOf(ctx, servers)
}

// ClientsOf counts the live clients of servers (get_client_list of each).
func (d *Daemon) ClientsOf(ctx context.Context, servers []int) (int, error) {
	n := 0
	for _, s := range servers {
		out, err := d.Command(ctx, "get_client_list "+strconv.Itoa(s))
		if err != nil {
			return 0, err
		}
		n += len(pids(out))
	}
	return n, nil
}

// pids reads one pid per line, ignoring anything else.
func pids(s string) []int {
	var out []int
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if p, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil && p > 0 {
			out = append(out, p)
		}
	}
	return out
}

// Layout names the per-GPU directories under root: <root>/<uuid>/<server>/{pipe,log}.
func Layout(root, uuid string, server int) (pipeDir, logDir string, err error) {
	if uuid == "" || strings.ContainsAny(uuid, "/\x00") || uuid == "." || uuid == ".." {
		return "", "", errors.New("GPU UUID unusable as a directory name")
	}
	base := filepath.Join(root, uuid, strconv.Itoa(server))
	return filepath.Join(base, "pipe"), filepath.Join(base, "log"), nil
}
