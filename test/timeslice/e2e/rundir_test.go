//go:build timeslicee2e

package timeslicee2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/identity"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// One daemon per run directory (docs/timeslice.md, "The daemon"). These tests run in
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
	if err := timeslice.Run(ctx, second); !errors.Is(err, timeslice.ErrRunning) {
		t.Fatalf("second daemon on run directory %s (socket %s): %v, want ErrRunning", cfg.RunDir, second.Socket, err)
	}
	if client.Reachable(ctx, second.Socket) {
		t.Fatalf("a second daemon answers on %s", second.Socket)
	}
	other := testCfg(t)
	other.Socket = filepath.Join(t.TempDir(), "third.sock")
	startDaemon(t, other) // another run directory: its own daemon
}

// waitServing waits until a daemon answers on cfg.Socket (its Run reports on done).
func waitServing(t *testing.T, cfg timeslice.Config, done <-chan error) {
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

// memfillResult is gs-memfill's report.
type memfillResult struct {
	Allocated uint64 `json:"allocated"`
	StoppedBy string `json:"stopped_by"`
}

// startMemfill starts gs-memfill in group file's state, allocating up to max
// bytes in one go and holding them for hold; returns its report and the process.
func startMemfill(t *testing.T, e *e2e, file, simState string, max uint64, hold time.Duration,
	env ...string) (memfillResult, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e.bin, "gs-memfill"), "--max", strconv.FormatUint(max, 10), "--chunk",
		strconv.FormatUint(max, 10), "--hold-ms", strconv.FormatInt(hold.Milliseconds(), 10))
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+e.preload, "LD_LIBRARY_PATH="+e.sim, "GPUSLICE_SIM_STATE="+simState,
		"GPUSLICE_GROUP_FILE="+file, "GPUSLICE_LOG=0")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) // it may have exited: nothing to report
	var r memfillResult
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err != nil {
		t.Fatalf("gs-memfill: %v", err)
	}
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatalf("gs-memfill said %q: %v", line, err)
	}
	return r, cmd
}

// TestReliabilityRunDirReplacedOneState: a group's member holds 600 MiB of its
// 1 GiB when the run directory is replaced under it (moved aside, or removed)
// and a new directory made at the same path. Preparing the group again (what
// `gpuslice run --group` does) must not give it a second state: moved aside,
// the state its member uses is taken back and a new member is held to what is
// left; removed, no new state is made (the run refuses, and a member of the
// run that made the group, GPUSLICE_GROUP_MANAGED=1, makes none either and is
// refused its allocations). Real processes on the
// simulated GPU: what the group's members hold together never exceeds its
// memory.max.
func TestReliabilityRunDirReplacedOneState(t *testing.T) {
	e := setupE2E(t)
	for _, removed := range []bool{false, true} {
		t.Run(fmt.Sprintf("removed=%v", removed), func(t *testing.T) {
			base := t.TempDir()
			runDir, simState := filepath.Join(base, "run"), filepath.Join(base, "sim.state")
			const limit, part = 1 << 30, 600 << 20
			prepare := func() error {
				// As `gpuslice run --group g` prepares it.
				err := groupmgr.New(groupmgr.Config{RunDir: runDir}).Create(context.Background(), "g",
					groupmgr.Resources{Settings: group.Settings{MemoryMax: limit}}, groupmgr.CreateOptions{Adopt: true, NoWait: true})
				if err != nil {
					return err
				}
				// What the daemon does when it applies the settings (none runs here).
				_, err = groupstate.SetLimit(groupstate.Path(runDir, "g"), limit, groupstate.LockWait)
				return err
			}
			if err := prepare(); err != nil {
				t.Fatal(err)
			}
			file := groupstate.Path(runDir, "g")
			a, _ := startMemfill(t, e, file, simState, part, time.Minute)
			if a.Allocated != part {
				t.Fatalf("first member got %d bytes (%s), want %d", a.Allocated, a.StoppedBy, part)
			}
			if removed {
				if err := os.RemoveAll(runDir); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Rename(runDir, runDir+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(runDir, 0o755); err != nil {
				t.Fatal(err)
			}
			err := prepare()
			if removed {
				if !errors.Is(err, identity.ErrOrphanedState) {
					t.Fatalf("group prepared again while its member uses a removed state: %v, want ErrOrphanedState", err)
				}
				// A member started by the run that made the group (its
				// file managed) does not make one either.
				c, _ := startMemfill(t, e, file, simState, part, 0, "GPUSLICE_GROUP_MANAGED=1")
				if c.Allocated != 0 {
					t.Fatalf("a member without its group's state allocated %d bytes (%s)", c.Allocated, c.StoppedBy)
				}
				if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("a second state file was made: %v", err)
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := startMemfill(t, e, file, simState, part, 0)
			if a.Allocated+b.Allocated > limit {
				t.Fatalf("the group's members hold %d + %d bytes, over its memory.max %d (a second state)",
					a.Allocated, b.Allocated, limit)
			}
			if b.StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" {
				t.Fatalf("second member stopped by %q, want CUDA_ERROR_OUT_OF_MEMORY", b.StoppedBy)
			}
		})
	}
}
