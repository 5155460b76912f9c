//go:build timeslicee2e

package timeslicee2e

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/proto"

	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// buildShim compiles test/timeslice/<name>.c into a shared object.
func buildShim(t testing.TB, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name+".so")
	b, err := exec.Command("cc", "-std=c11", "-O2", "-shared", "-fPIC", "-o", out,
		filepath.Join(repoRoot(), "test/timeslice", name+".c")).CombinedOutput()
	if err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, b)
	}
	return out
}

// preloadWith puts shim just before libgpuslice (after a sanitizer runtime).
func (e *e2e) preloadWith(shim string) string {
	f := strings.Fields(e.preload)
	f = append(f[:len(f)-1], shim, f[len(f)-1])
	return strings.Join(f, " ")
}

// lineReader collects a process's stdout lines and lets a test wait for one.
type lineReader struct {
	mu    sync.Mutex
	lines []string
	added chan struct{}
}

func readLines(t testing.TB, cmd *exec.Cmd) *lineReader {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &lineReader{added: make(chan struct{}, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, sc.Text())
			r.mu.Unlock()
			select {
			case r.added <- struct{}{}:
			default:
			}
		}
	}()
	return r
}

func (r *lineReader) wait(t testing.TB, prefix string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		r.mu.Lock()
		for _, l := range r.lines {
			if strings.HasPrefix(l, prefix) {
				r.mu.Unlock()
				return l
			}
		}
		r.mu.Unlock()
		select {
		case <-r.added:
		case <-deadline:
			t.Fatalf("no line %q within %v", prefix, within)
		}
	}
}

// TestReliabilityE2EWallClockStep: the wall clock steps back by an hour while
// the daemon is away (clockstep.so makes libgpuslice's CLOCK_REALTIME read an
// hour ahead, so every deadline taken on it before lies an hour away). The
// gate's waits are on the monotonic clock: it reconnects to the returning
// daemon within its retry interval instead of running ungated for the hour.
func TestReliabilityE2EWallClockStep(t *testing.T) {
	e := setupE2E(t)
	shim := buildShim(t, "clockstep")
	cfg := testCfg(t)
	setGroup(t, cfg, "lone")
	step := filepath.Join(t.TempDir(), "step")
	stop := runDaemon(t, cfg)
	cmd := exec.Command(e.tenant, "--mode", "sync", "--kernel-us", "200", "--seconds", "4")
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+e.preloadWith(shim), "LD_LIBRARY_PATH="+e.sim,
		"GPUSLICE_SIM_STATE="+filepath.Join(cfg.RunDir, "sim.state"), nodestatus.EnvSocket+"="+cfg.Socket,
		"GPUSLICE_GROUP_FILE="+groupstate.Path(cfg.RunDir, "lone"), "GS_CLOCKSTEP_FILE="+step)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	lines := readLines(t, cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill() //nolint:errcheck // may have exited
	lines.wait(t, "win 0", 10*time.Second)
	if err := os.WriteFile(step, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stop()
	stop = runDaemon(t, cfg)
	defer stop()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tenant: %v\n%s", err, stderr.String())
	}
	msg := stderr.String()
	if !strings.Contains(msg, "lost the node daemon") || !strings.Contains(msg, "is back") {
		t.Fatalf("stderr %q: want the daemon lost and back (a wait stretched by the wall clock's step)", msg)
	}
}

// runDaemon runs a daemon in this process until the returned stop is called
// (or the test ends).
func runDaemon(t testing.TB, cfg timeslice.Config) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- timeslice.Run(ctx, cfg) }()
	deadline := time.Now().Add(5 * time.Second)
	for !client.Reachable(ctx, cfg.Socket) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("daemon did not come up: %v", <-done)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("daemon: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestReliabilityE2EWaitOnLoss: with GPUSLICE_GATE_ON_LOSS=wait, a daemon
// that answers but grants nothing for longer than GPUSLICE_GATE_TIMEOUT_MS
// keeps the tenant's launches waiting (the run policy would let them go); the
// grant, when it comes, lets them go.
func TestReliabilityE2EWaitOnLoss(t *testing.T) {
	e := setupE2E(t)
	var lines *lineReader
	p, acq, stderr := e.protocolPeer(t, []string{"--mode", "sync", "--kernel-us", "100", "--seconds", "30"},
		[]string{"GPUSLICE_GATE_ON_LOSS=wait", "GPUSLICE_GATE_TIMEOUT_MS=100"}, func(cmd *exec.Cmd) { lines = readLines(t, cmd) })
	// No grant for 1.5 s (15x the timeout), then one of 10 s.
	time.Sleep(1500 * time.Millisecond)
	p.send(&proto.Grant{GPU: acq.GPU, Seq: 1, SliceNs: uint64(10 * time.Second), ValidNs: uint64(10 * time.Second)})
	// The first window's count is the launches that returned in it: with the
	// launches waiting, only the one that waited for the grant.
	w := lines.wait(t, "win 0 ", 10*time.Second)
	f := strings.Fields(w)
	if n, err := strconv.Atoi(f[2]); err != nil || n > 1 {
		t.Fatalf("%q: %s launches went without a grant (want at most the one that waited)\n%s", w, f[2], stderr.String())
	}
	if !strings.Contains(stderr.String(), "launches wait") {
		t.Fatalf("stderr %q: want a notice that launches wait", stderr.String())
	}
}
