// Package timeslicetest lets a package's test binary double as the gpuslice
// CLI's time-slice daemon (`gpuslice node`), for tests of code that starts or
// supervises one (the runner's PrepareRun, the node agent's supervision).
package timeslicetest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/proto"
	"github.com/gpuslice/gpuslice/internal/timeslice"
)

// Main is a TestMain: run as "<test binary> node ..." the binary is a
// time-slice daemon with one made-up GPU until SIGTERM; otherwise it runs the
// tests.
func Main(m *testing.M) { MainRun(m.Run) }

// MainRun is Main with the tests run by run (m.Run with a TestMain's own
// setup and cleanup around it); it exits with run's code.
func MainRun(run func() int) {
	if len(os.Args) > 1 && os.Args[1] == "node" {
		if err := daemon(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "node:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(run())
}

// daemon takes the flags a client passes to `gpuslice node` (those it does
// not use are accepted and ignored).
func daemon(args []string) error {
	cfg := timeslice.DefaultConfig(os.Getenv)
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.StringVar(&cfg.Socket, "socket", "", "")
	fs.StringVar(&cfg.RunDir, "run-dir", "", "")
	fs.StringVar(&cfg.ProcRoot, "proc-root", cfg.ProcRoot, "")
	fs.Bool("if-not-running", false, "")
	fs.String("driver", "", "")
	fs.String("sim-dir", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.ListGPUs = func() ([]proto.UUID, error) { return []proto.UUID{{0x6a, 1}}, nil }
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	return timeslice.Run(ctx, cfg)
}

// Start runs a time-slice daemon in the test's process on runDir (socket
// runDir/node.sock, one made-up GPU) until the test ends; an error it returns
// other than its cancellation fails the test.
func Start(t testing.TB, runDir string) {
	t.Helper()
	cfg := timeslice.DefaultConfig(func(string) string { return "" })
	cfg.RunDir, cfg.Socket = runDir, filepath.Join(runDir, "node.sock")
	cfg.ListGPUs = func() ([]proto.UUID, error) { return []proto.UUID{{0x6a, 1}}, nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- timeslice.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("daemon: %v", err)
		}
	})
}
