//go:build timeslicee2e

package timeslicee2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// threadsOf is the number of threads of process pid (/proc/<pid>/status).
func threadsOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads line")
	return 0
}

// TestReliabilityThreadsGivenBack: 1,000 connections that said hello, open at
// once, then closed: the daemon's threads come back to within 64 of what it
// had before. Each connection's goroutine has a thread of its own while it
// lives; one unlocked at its end went back to the runtime's idle threads,
// which are never ended: 1,008 threads stayed (7 before; issue 38).
func TestReliabilityThreadsGivenBack(t *testing.T) {
	cfg := testCfg(t)
	cmd := exec.Command(os.Args[0], "node", "--socket", cfg.Socket, "--run-dir", cfg.RunDir)
	cmd.Env = append(os.Environ(), "GPUSLICE_RUN_DIR="+cfg.RunDir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) //nolint:errcheck // it may have exited
	for deadline := time.Now().Add(time.Minute); !client.Reachable(context.Background(), cfg.Socket); {
		if time.Now().After(deadline) {
			t.Fatal("daemon did not come up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pid := cmd.Process.Pid
	before := threadsOf(t, pid)
	const n = 1000
	conns := make([]*client.Client, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			c, err := client.Dial(context.Background(), cfg.Socket) // says hello, waits for the welcome
			if err != nil {
				errs <- err
				return
			}
			conns[i] = c
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("connection: %v", err)
	}
	during := threadsOf(t, pid)
	for _, c := range conns {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var after int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		after = threadsOf(t, pid)
		if after <= before+64 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("daemon threads: %d before, %d with %d connections open, %d after they closed", before, during, n, after)
	if after > before+64 {
		t.Fatalf("daemon threads: %d before %d connections, %d after they closed: want at most %d", before, n, after, before+64)
	}
}
