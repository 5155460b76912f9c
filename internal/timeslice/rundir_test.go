package timeslice

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// One daemon per run directory (docs/node.md, "The daemon"). These tests run in
// `make test-reliability`.

// TestReliabilityOneDaemonPerRunDir: a second daemon given another socket but
// the same run directory is refused (two daemons would give every group two
// schedulers, each granting the whole GPU); one with another run directory runs.
func TestReliabilityOneDaemonPerRunDir(t *testing.T) {
	cfg := testCfg(t)
	startDaemon(t, cfg)
	second := cfg
	second.Socket = filepath.Join(t.TempDir(), "other.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Run(ctx, second); !errors.Is(err, ErrRunning) {
		t.Fatalf("second daemon on run directory %s (socket %s): %v, want ErrRunning", cfg.RunDir, second.Socket, err)
	}
	if client.Reachable(ctx, second.Socket) {
		t.Fatalf("a second daemon answers on %s", second.Socket)
	}
	other := testCfg(t)
	other.Socket = filepath.Join(t.TempDir(), "third.sock")
	startDaemon(t, other) // another run directory: its own daemon
}

// TestReliabilityRunDirReplaced: a daemon whose run directory is removed and
// made again at once (faster than any poll for its absence) stops: it no
// longer serves the directory at that path, so it must not go on granting next
// to a daemon that serves the new one. A new daemon then takes the new directory.
func TestReliabilityRunDirReplaced(t *testing.T) {
	cfg := testCfg(t)
	cfg.Socket = filepath.Join(t.TempDir(), "node.sock") // outside the run directory: it survives
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	waitServing(t, cfg, done)
	aside := cfg.RunDir + ".old"
	if err := os.Rename(cfg.RunDir, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cfg.RunDir, 0o755); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("daemon: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("daemon still serves after its run directory was replaced")
	}
	// The new directory is free: a new daemon takes it.
	done2 := make(chan error, 1)
	go func() { done2 <- Run(ctx, cfg) }()
	waitServing(t, cfg, done2)
	cancel()
	if err := <-done2; err != nil {
		t.Fatalf("new daemon: %v", err)
	}
}

// waitServing waits until a daemon answers on cfg.Socket (its Run reports on done).
func waitServing(t *testing.T, cfg Config, done <-chan error) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !client.Reachable(context.Background(), cfg.Socket); {
		select {
		case err := <-done:
			t.Fatalf("daemon exited: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("daemon did not come up")
		}
	}
}
