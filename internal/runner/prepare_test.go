package runner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/proto"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// The test binary doubles as the gpuslice CLI that PrepareRun starts: run as
// "<test binary> node ..." it is a time-slice daemon.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "node" {
		if err := childDaemon(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "node:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childDaemon takes the flags EnsureRunning passes to `gpuslice node`.
func childDaemon(args []string) error {
	cfg := timeslice.DefaultConfig(os.Getenv)
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.StringVar(&cfg.Socket, "socket", "", "")
	fs.StringVar(&cfg.RunDir, "run-dir", "", "")
	fs.Bool("if-not-running", false, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.ListGPUs = func() ([]proto.UUID, error) { return []proto.UUID{{0x6a, 1}}, nil }
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	return timeslice.Run(ctx, cfg)
}

// PrepareRun validates the run flags (changing nothing on error), writes the
// group's settings, and starts a daemon that the run can reach.
func TestPrepareRun(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "node.sock")
	getenv := func(k string) string {
		return map[string]string{"GPUSLICE_RUN_DIR": dir, timeslice.EnvSocket: socket}[k]
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopDaemon(t, dir) })
	bad := RunSetup{Group: "job", Flags: group.RunFlags{Slice: "20ms", Share: "30%"}}
	if _, err := PrepareRun(context.Background(), getenv, bad); !errors.Is(err, group.ErrInvalid) {
		t.Fatalf("slice and share together: %v", err)
	}
	if group.NewTree(dir).Exists("job") {
		t.Fatal("a refused run created its group")
	}
	env, err := PrepareRun(context.Background(), getenv, RunSetup{Group: "job", MemoryMax: 1 << 30,
		Flags: group.RunFlags{Slice: "20ms", ShareMax: "40%", Priority: "high"}, Start: client.StartOptions{Exe: exe}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(env, []string{timeslice.EnvSocket + "=" + socket}) {
		t.Fatalf("env %q", env)
	}
	if !client.Reachable(context.Background(), socket) {
		t.Fatal("no daemon answers after PrepareRun")
	}
	s, err := group.NewTree(dir).Read("job")
	if err != nil || s.Slice != 20*time.Millisecond || s.MemoryMax != 1<<30 || s.Priority.String() != "high" ||
		s.ShareMax != 0.4 {
		t.Fatalf("group settings %+v %v", s, err)
	}
}

// stopDaemon stops the daemon that PrepareRun started in runDir (once its
// status file names it) and waits until it has exited, so that nothing of it
// writes into the test's directory any more.
func stopDaemon(t *testing.T, runDir string) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := timeslice.ReadStatus(runDir)
		if err == nil && st.PID > 0 {
			if err := client.StopPID(st.PID, unix.SIGTERM, 30*time.Second); err != nil {
				t.Error(err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("no daemon status in %s: %v", runDir, err)
			return
		}
	}
}
