package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
	"github.com/gpuslice/gpuslice/internal/timeslice/timeslicetest"
)

// The test binary doubles as the gpuslice CLI the agent supervises: run as
// "<test binary> node ..." it is a time-slice daemon. The tests run with a
// simulated-GPU state file of their own for the whole process (simState).
func TestMain(m *testing.M) { timeslicetest.MainRun(func() int { return withSimState(m) }) }

// withSimState runs the tests with GPUSLICE_SIM_STATE naming a state file in
// a temporary directory removed after them. The simulated NVML attaches its
// state once per process, at its first open: a state file per test (each
// run of go test -count) left the driver on the first one while
// gpuslice-sim-ctl, run with the test's, found none.
func withSimState(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gs-agent-sim-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "simulated GPU state:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }() //nolint:errcheck // a temporary directory
	if err := os.Setenv("GPUSLICE_SIM_STATE", filepath.Join(dir, "sim.state")); err != nil {
		fmt.Fprintln(os.Stderr, "simulated GPU state:", err)
		return 1
	}
	return m.Run()
}

// A daemon killed under the agent is serving again at once, and the agent
// stops the daemon it supervised when it ends.
func TestSuperviseDaemon(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := Config{NodeValues: NodeValues{RunDir: filepath.Join(dir, "run"), Socket: filepath.Join(dir, "node.sock"),
		Driver: gpu.ModeSim, DaemonBinary: exe}, ProcRoot: "/proc"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- superviseDaemon(ctx, cfg) }()
	first := daemonPID(t, cfg, 0)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	second := daemonPID(t, cfg, first)
	t.Logf("daemon %d killed; daemon %d serving %d ms later", first, second, time.Since(killed).Milliseconds())
	fd, err := unix.PidfdOpen(second, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(fd) }() //nolint:errcheck // test
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("supervision ended with %v", err)
	}
	if n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0); err != nil || n != 1 {
		t.Fatalf("daemon %d still running after the agent ended (%d, %v)", second, n, err)
	}
}

// A missing daemon binary is a clear error, not a silent agent without one.
func TestSuperviseDaemonMissingBinary(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{NodeValues: NodeValues{RunDir: dir, Socket: filepath.Join(dir, "s"), DaemonBinary: filepath.Join(dir, "gpuslice")}}
	err := superviseDaemon(context.Background(), cfg)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err %v, want not-exist", err)
	}
}

// daemonPID waits for a daemon other than not to serve cfg.Socket.
func daemonPID(t *testing.T, cfg Config, not int) int {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st, err := nodestatus.Read(cfg.RunDir)
		if err == nil && st.PID > 0 && st.PID != not && client.Reachable(context.Background(), cfg.Socket) {
			return st.PID
		}
		if time.Now().After(deadline) {
			t.Fatalf("no daemon other than %d came up: %v", not, err)
		}
	}
}
