package mps

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testbin"
)

// The stand-in daemon of the simulated GPU (built by make): any program with
// the control daemon's command line works.
func standIn(t *testing.T) string {
	t.Helper()
	const standIn = "sim/gpuslice-sim-mps-control"
	return filepath.Join(testbin.Dir(t, standIn), standIn)
}

// A killed daemon is restarted; a clean stop uses quit.
func TestDaemonRestartAndQuit(t *testing.T) {
	root, err := os.MkdirTemp("", "mps") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	var pipe, logd string
	pipe, logd, err = Layout(root, "GPU-5e1ac0de-6770-7573-6c69-636500000000", 0)
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{Binary: standIn(t), UUID: "GPU-5e1ac0de-6770-7573-6c69-636500000000", PipeDir: pipe, LogDir: logd,
		Env: os.Environ(), QuitTimeout: 5 * time.Second,
		Policy: Policy{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond, Stable: time.Minute}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	server := func() int {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			out, err := d.Command(ctx, "get_server_list")
			if ps := pids(out); err == nil && len(ps) == 1 {
				return ps[0]
			}
		}
		t.Fatal("daemon did not answer in 10 s")
		return 0
	}
	first := server()
	if n, err := d.Clients(ctx); err != nil || n != 0 {
		t.Fatalf("clients = %d, %v; want 0", n, err)
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var second int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && (second == 0 || second == first); {
		second = server()
	}
	if second == first || d.Starts() != 2 {
		t.Fatalf("after kill: server %d (was %d), starts %d; want a new server, 2 starts", second, first, d.Starts())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(pipe, "gpuslice-sim-mps.sock")); !os.IsNotExist(err) {
		t.Fatalf("socket after quit: %v, want gone (clean shutdown)", err)
	}
	if err := syscall.Kill(second, 0); err == nil {
		t.Fatalf("daemon %d still running after Run returned", second)
	}
}

func TestLayout(t *testing.T) {
	if _, _, err := Layout("/r", "../x", 0); err == nil {
		t.Error("Layout accepted a UUID with a slash")
	}
	p, l, err := Layout("/r", "GPU-1", 2)
	if err != nil || p != "/r/GPU-1/2/pipe" || l != "/r/GPU-1/2/log" {
		t.Errorf("Layout = %q, %q, %v", p, l, err)
	}
}
