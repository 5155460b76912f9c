//go:build timeslicee2e

package timeslicee2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// BenchmarkConnFlood: grant round trips of a client (its own process, the Go
// client, one GPU) while the daemon is idle; then while one unprivileged user
// holds the connections it got of 10,000 that said hello (MaxConnsPerUID
// admitted, the rest refused); then while that user also reconnects in a
// tight loop (each attempt refused). Reports the three side by side and the
// p99 ratios to idle (each the median of 3 interleaved runs of 20,000 round
// trips: on a small shared VM one run's p99 is mostly the host's noise). Root
// only (the flood runs as nobody).
func BenchmarkConnFlood(b *testing.B) {
	const n = 10000
	cfg := testCfg(b)
	openToAll(b, cfg)
	startDaemon(b, cfg)
	for b.Loop() {
		var idle, held, churned [][2]time.Duration
		var line string
		for range 3 { // interleaved: the host's load drifts
			idle = append(idle, grantP(b, cfg))
			flood := startChildAs(b, cfg, nobody, "flood", "GS_N="+strconv.Itoa(n))
			line = flood.expect(b, "flood ", 3*time.Minute)
			held = append(held, grantP(b, cfg))
			churn := startChildAs(b, cfg, nobody, "flood", "GS_N=0", "GS_CHURN=1")
			churn.expect(b, "flood ", time.Minute)
			churned = append(churned, grantP(b, cfg))
			for _, p := range []*childProc{flood, churn} {
				if err := p.cmd.Process.Kill(); err != nil {
					b.Fatal(err)
				}
				if err := <-p.done; err == nil {
					b.Fatalf("%s exited 0 after SIGKILL", p.cmd.Path)
				}
			}
			waitConns(b, cfg) // the daemon has seen every flood connection close
		}
		i, h, c := medianP(idle), medianP(held), medianP(churned)
		b.ReportMetric(float64(i[1].Nanoseconds())/1e3, "idle-p99-µs")
		b.ReportMetric(float64(h[1].Nanoseconds())/1e3, "held-p99-µs")
		b.ReportMetric(float64(c[1].Nanoseconds())/1e3, "churn-p99-µs")
		fmt.Printf("connection flood: %d connections from one user (%s); grant p50/p99 idle %v/%v, "+
			"flood held %v/%v (p99 %.2fx idle), flood held + reconnecting %v/%v (p99 %.2fx idle)\n", n, line,
			i[0], i[1], h[0], h[1], float64(h[1])/float64(i[1]), c[0], c[1], float64(c[1])/float64(i[1]))
	}
}

// grantP is the p50 and p99 of one grantRTT run.
func grantP(b *testing.B, cfg timeslice.Config) [2]time.Duration {
	p50, p99 := percentiles(grantRTT(b, cfg))
	return [2]time.Duration{p50, p99}
}

// medianP is the median p50 and median p99 of runs.
func medianP(runs [][2]time.Duration) [2]time.Duration {
	var p50s, p99s []time.Duration
	for _, r := range runs {
		p50s, p99s = append(p50s, r[0]), append(p99s, r[1])
	}
	slices.Sort(p50s)
	slices.Sort(p99s)
	return [2]time.Duration{p50s[len(p50s)/2], p99s[len(p99s)/2]}
}

// waitConns waits until the daemon has seen the flood's connections close:
// the flooding user is admitted again.
func waitConns(b *testing.B, cfg timeslice.Config) {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if startChildAs(b, cfg, nobody, "dial").expect(b, "dial", 10*time.Second) != "dial busy" {
			return
		}
	}
	b.Fatal("the daemon still refuses the flooding user")
}

// grantRTT runs the "grants" child (one client, 20,000 round trips) and
// returns stand-ins for its round trips: 49 at its p50 for one at its p99.
func grantRTT(b *testing.B, cfg timeslice.Config) []time.Duration {
	b.Helper()
	p := startChild(b, cfg, "grants", "", "GS_N=20000", "GS_CLIENTS=1")
	var out []time.Duration
	for _, l := range p.all(b, 5*time.Minute) {
		var p50, p99, rate int64
		if n, _ := fmt.Sscanf(l, "rtt %d %d %d", &p50, &p99, &rate); n == 3 {
			for range 49 {
				out = append(out, time.Duration(p50))
			}
			out = append(out, time.Duration(p99))
		}
	}
	if len(out) == 0 {
		b.Fatal("no round trips")
	}
	return out
}

// BenchmarkDaemonKillRecovery: a tenant on the simulated GPU under
// `gpuslice run` (which supervises the daemon); the daemon is killed with
// SIGKILL five times. Reports how long until a new daemon answers a hello
// on the socket and until the tenant's gate is connected to it again (its "is back"
// line): from then on its launches are gated again.
func BenchmarkDaemonKillRecovery(b *testing.B) {
	e := setupE2E(b)
	dir := b.TempDir()
	socket := filepath.Join(dir, "node.sock")
	for b.Loop() {
		cmd := exec.Command(filepath.Join(e.bin, "gpuslice"), "run", "--group", "kb", "--slice", "5ms", "--",
			e.tenant, "--mode", "busy", "--kernel-us", "500", "--seconds", "60")
		cmd.Env = append(os.Environ(), "GPUSLICE_RUN_DIR="+dir, nodestatus.EnvSocket+"="+socket,
			"GPUSLICE_SIM_STATE="+filepath.Join(dir, "sim.state"), "GPUSLICE_DRIVER=sim")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		back := make(chan time.Time, 16)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if strings.Contains(sc.Text(), "is back") {
					back <- time.Now()
				}
			}
		}()
		var up, gated []time.Duration
		pid := waitGroupGranted(b, dir, "kb", 0)
		for range 5 {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				b.Fatal(err)
			}
			killed := time.Now()
			for syscall.Kill(pid, 0) == nil { // until it is gone (its listening socket with it)
				time.Sleep(100 * time.Microsecond)
			}
			for !welcomes(socket) {
				if time.Since(killed) > 10*time.Second {
					b.Fatal("no daemon came back")
				}
				time.Sleep(time.Millisecond)
			}
			up = append(up, time.Since(killed))
			select {
			case t := <-back:
				gated = append(gated, t.Sub(killed))
			case <-time.After(10 * time.Second):
				b.Fatal("the tenant's gate did not reconnect")
			}
			pid = waitGroupGranted(b, dir, "kb", pid)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			b.Fatal(err)
		}
		_ = cmd.Wait() //nolint:errcheck // terminated
		if st, err := nodestatus.Read(dir); err == nil {
			_ = syscall.Kill(st.PID, syscall.SIGTERM) //nolint:errcheck // may be gone
		}
		slices.Sort(up)
		slices.Sort(gated)
		b.ReportMetric(float64(up[len(up)/2].Microseconds())/1e3, "up-p50-ms")
		b.ReportMetric(float64(up[len(up)-1].Microseconds())/1e3, "up-max-ms")
		b.ReportMetric(float64(gated[len(gated)/2].Microseconds())/1e3, "gated-p50-ms")
		b.ReportMetric(float64(gated[len(gated)-1].Microseconds())/1e3, "gated-max-ms")
		fmt.Printf("daemon kill -9 -> new daemon answering: %v; -> tenant gated again: %v (5 kills)\n", up, gated)
	}
}

// waitGroupGranted waits until a daemon other than not publishes that group
// was granted GPU time, and returns its pid.
func waitGroupGranted(b *testing.B, runDir, group string, not int) int {
	b.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		st, err := nodestatus.Read(runDir)
		if err != nil || st.PID == not {
			continue
		}
		for _, g := range st.GPUs {
			for _, e := range g.Groups {
				if e.Group == group && e.Grants > 0 {
					return st.PID
				}
			}
		}
	}
	b.Fatalf("group %s was never granted by a daemon other than %d", group, not)
	return 0
}

// welcomes reports whether a daemon on socket answers a hello.
func welcomes(socket string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := client.Dial(ctx, socket)
	if err != nil {
		return false
	}
	return c.Close() == nil
}
