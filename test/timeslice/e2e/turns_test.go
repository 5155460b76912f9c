//go:build timeslicee2e

package timeslicee2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/internal/proto"

	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// TestReliabilityExpiredSiblingKeepsWaiters: two members of one group (two
// connections of this process: one pid group). A holds the grant and never
// hands over; B shares the grant, hands its part back and asks for more. When
// A's grant expires, B is not forgotten: it gets the group's next turn within
// the slice plus the grace, not never.
func TestReliabilityExpiredSiblingKeepsWaiters(t *testing.T) {
	cfg := testCfg(t)
	startDaemon(t, cfg)
	ctx := context.Background()
	a, err := client.Dial(ctx, cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close() //nolint:errcheck // test
	b, err := client.Dial(ctx, cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close() //nolint:errcheck // test
	if a.Group != b.Group {
		t.Fatalf("groups %q and %q: want one", a.Group, b.Group)
	}
	ga, err := a.Acquire(testGPU)
	if err != nil {
		t.Fatal(err)
	}
	gb, err := b.Acquire(testGPU)
	if err != nil {
		t.Fatal(err)
	}
	if gb.Seq != ga.Seq {
		t.Fatalf("sibling got grant %d while the group holds %d", gb.Seq, ga.Seq)
	}
	asked := time.Now()
	if err := b.Release(testGPU, gb.Seq, true); err != nil {
		t.Fatal(err)
	}
	if err := b.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	next, err := b.WaitGrant()
	if err != nil {
		t.Fatalf("the waiting member got no grant after its sibling's expired (asked %v ago): %v",
			time.Since(asked).Round(time.Millisecond), err)
	}
	if next.Seq == ga.Seq {
		t.Fatalf("got the expired grant %d again", next.Seq)
	}
	// A learns that its grant is void, and may ask again.
	if err := a.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := a.Next()
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := m.(*proto.Revoke); ok && r.Reason == proto.RevokeExpired {
			break
		}
	}
}

// jobResult is one short job: when it finished (from the common start) and
// its longest launch call.
type jobResult struct {
	done, longest time.Duration
	stderr        string
}

// manyJobs starts n gs-tenant jobs (kernels of kernel µs each, then a
// synchronize) in one group at a common start, gated by cfg's daemon or, with
// gated false, without libgpuslice; returns each job's result.
func manyJobs(t testing.TB, e *e2e, cfg timeslice.Config, n, kernels, kernelUs int, gated bool) []jobResult {
	t.Helper()
	t0 := time.Now().Add(time.Duration(n) * 15 * time.Millisecond) // after every process is up
	res := make([]jobResult, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		cmd := exec.Command(e.tenant, "--mode", "job", "--n", strconv.Itoa(kernels), "--kernel-us", strconv.Itoa(kernelUs),
			"--seconds", "1", "--t0", strconv.FormatInt(t0.UnixNano(), 10))
		// Contexts take no memory: 300 of a real card's (a few hundred MiB each) fit on no GPU, and this is about turns.
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+e.sim, "GPUSLICE_SIM_STATE="+filepath.Join(cfg.RunDir, "sim.state"),
			"GPUSLICE_SIM_CONTEXT_MEMORY=0")
		if gated {
			cmd.Env = append(cmd.Env, "LD_PRELOAD="+e.preload, nodestatus.EnvSocket+"="+cfg.Socket, "GPUSLICE_RUN_DIR="+cfg.RunDir,
				"GPUSLICE_GROUP_FILE="+groupstate.Path(cfg.RunDir, "jobs"))
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		wg.Go(func() {
			out, err := cmd.Output()
			res[i].stderr = stderr.String()
			var done, longest int64
			if _, serr := fmt.Sscanf(string(out), "job %d %d", &done, &longest); err != nil || serr != nil {
				errs <- fmt.Errorf("job %d: %w %w: %q\n%s", i, err, serr, out, stderr.String())
				return
			}
			res[i].done, res[i].longest = time.Duration(done), time.Duration(longest)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return res
}

// waitLog collects the daemon's grant waits (Config.Observe).
type waitLog struct {
	mu       sync.Mutex
	n        int
	maxWait  time.Duration
	maxTurns uint64
}

func (w *waitLog) observer() *timeslice.Observer {
	return &timeslice.Observer{Wait: func(_ proto.UUID, _ string, wait time.Duration, turns uint64) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.n++
		w.maxWait, w.maxTurns = max(w.maxWait, wait), max(w.maxTurns, turns)
	}}
}

// TestReliabilityE2EManyMembers: 300 short jobs started at once in one group
// (GPUSLICE_NODE_MANY=N changes the count). Every member that asks while a
// sibling holds the group's grant shares it or gets the group's next turn:
// none waits out the gate timeout and runs ungated (its notice on stderr),
// none loses the daemon, and none waits longer than one slice plus the grace:
// every ask is served by the group's running grant or by the first slice the
// daemon hands out after it (counted in the daemon's turns, which the
// machine's load does not change; a slice lasts at most its length plus the
// grace). The longest wait on the daemon's clock is printed beside that bound.
// Runs in make test-reliability (300 processes on the machine at once).
func TestReliabilityE2EManyMembers(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("GPUSLICE_NODE_MANY"))
	if err != nil || n <= 0 {
		t.Skip("300 processes at once: runs in make test-reliability (GPUSLICE_NODE_MANY=300)")
	}
	e := setupE2E(t)
	cfg := testCfg(t)
	cfg.Policy = policy.DefaultConfig()
	var waits waitLog
	cfg.Observe = waits.observer()
	setGroup(t, cfg, "jobs")
	startDaemon(t, cfg)
	res := manyJobs(t, e, cfg, n, 20, 100, true)
	var last, longest time.Duration
	for i, r := range res {
		if r.stderr != "" {
			t.Errorf("job %d said: %q", i, r.stderr)
		}
		last, longest = max(last, r.done), max(longest, r.longest)
	}
	waits.mu.Lock()
	defer waits.mu.Unlock()
	bound := cfg.Policy.DefaultSlice + cfg.Policy.Grace
	if waits.n < n {
		t.Errorf("the daemon served %d asks for %d jobs", waits.n, n)
	}
	if waits.maxTurns > 0 {
		t.Errorf("a member waited %d slices past the first one after its ask (more than one slice plus grace, %v)",
			waits.maxTurns, bound)
	}
	t.Logf("%d jobs: last done %v after the start, longest launch %v; %d asks, each served by the first slice "+
		"after it (slices waited past it: %d); longest wait for a grant %v on the daemon's clock (one slice + grace: %v)",
		n, last.Round(time.Millisecond), longest.Round(100*time.Microsecond), waits.n, waits.maxTurns,
		waits.maxWait.Round(100*time.Microsecond), bound)
}

// BenchmarkE2EManyJobs: 300 short jobs (20 kernels of 100 µs) started at once
// in one group, without libgpuslice and then gated: when the last one is done
// (from the common start) and the longest launch call, and the ratio.
func BenchmarkE2EManyJobs(b *testing.B) {
	e := setupE2E(b)
	n := 300
	if v, err := strconv.Atoi(os.Getenv("GPUSLICE_NODE_MANY")); err == nil && v > 0 {
		n = v
	}
	summary := func(res []jobResult) (last, longest time.Duration, said int) {
		for _, r := range res {
			last, longest = max(last, r.done), max(longest, r.longest)
			if r.stderr != "" {
				said++
			}
		}
		return last, longest, said
	}
	for b.Loop() {
		cfg := testCfg(b)
		cfg.Policy = policy.DefaultConfig()
		setGroup(b, cfg, "jobs")
		bare, bareLong, _ := summary(manyJobs(b, e, cfg, n, 20, 100, false))
		var waits waitLog
		cfg.Observe = waits.observer()
		startDaemon(b, cfg)
		gated, gatedLong, said := summary(manyJobs(b, e, cfg, n, 20, 100, true))
		waits.mu.Lock()
		b.Logf("%d jobs at once: last done %v without gpuslice, %v gated (x%.2f); longest launch %v / %v; "+
			"%d gated jobs printed a notice; %d asks, longest wait for a grant %v (daemon's clock), at most %d "+
			"slices past the first after an ask", n, bare.Round(time.Millisecond), gated.Round(time.Millisecond),
			float64(gated)/float64(bare), bareLong.Round(100*time.Microsecond), gatedLong.Round(100*time.Microsecond), said,
			waits.n, waits.maxWait.Round(100*time.Microsecond), waits.maxTurns)
		waits.mu.Unlock()
		b.ReportMetric(float64(gated)/float64(bare), "x-ungated")
		b.ReportMetric(float64(gatedLong.Microseconds())/1e3, "longest-launch-ms")
	}
}
