package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/internal/slice"
)

// End-to-end: real tenant processes (test/node/tenant.c) launch kernels on the
// simulated GPU through bin/libgpuslice.so (LD_PRELOAD), gated by a daemon.
// Needs the build outputs: GPUSLICE_BIN (set by `make test`) or ../../bin.
// GPUSLICE_NODE_SIMDIR overrides the driver directory (default <bin>/sim);
// GPUSLICE_NODE_PRELOAD overrides LD_PRELOAD (the ASan run in mk/node.mk).

type e2e struct {
	bin, sim, preload, tenant string
}

func repoRoot() string { return filepath.Join("..", "..") }

func setupE2E(t testing.TB) *e2e {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	bin := os.Getenv("GPUSLICE_BIN")
	if bin == "" {
		bin = filepath.Join(repoRoot(), "bin")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	e := &e2e{bin: bin, sim: os.Getenv("GPUSLICE_NODE_SIMDIR"), preload: os.Getenv("GPUSLICE_NODE_PRELOAD")}
	if e.sim == "" {
		e.sim = filepath.Join(bin, "sim")
	}
	if e.preload == "" {
		e.preload = filepath.Join(bin, "libgpuslice.so")
	}
	for _, f := range []string{filepath.Join(e.sim, "libcuda.so.1"), filepath.Join(bin, "libgpuslice.so")} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("needs the build outputs (run make): %v", err)
		}
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("needs a C compiler to build the tenant program")
	}
	e.tenant = filepath.Join(t.TempDir(), "gs-tenant")
	out, err := exec.Command(cc, "-std=c11", "-D_GNU_SOURCE", "-O2", "-I", filepath.Join(repoRoot(), "include"), "-o", e.tenant,
		filepath.Join(repoRoot(), "test/node/tenant.c"), filepath.Join(repoRoot(), "apps/cuapi.c"), "-ldl").CombinedOutput()
	if err != nil {
		t.Fatalf("build tenant: %v\n%s", err, out)
	}
	return e
}

// tenantSpec is one tenant process: its group and gs-tenant arguments.
type tenantSpec struct {
	group string
	args  []string
}

// run starts the tenants at a common t0 and returns each one's stdout lines.
func (e *e2e) run(t testing.TB, cfg Config, simState string, specs []tenantSpec, start time.Time) [][]string {
	t.Helper()
	t0 := start.UnixNano()
	outs := make([][]string, len(specs))
	var wg sync.WaitGroup
	errs := make(chan error, len(specs))
	for i, s := range specs {
		args := append([]string{"--t0", strconv.FormatInt(t0, 10)}, s.args...)
		cmd := exec.Command(e.tenant, args...)
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+e.preload, "LD_LIBRARY_PATH="+e.sim,
			"GPUSLICE_SIM_STATE="+simState, EnvSocket+"="+cfg.Socket, "GPUSLICE_RUN_DIR="+cfg.RunDir,
			"GPUSLICE_GROUP="+s.group, "GPUSLICE_GROUP_FILE="+paths.GroupStateFile(cfg.RunDir, s.group))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		wg.Go(func() {
			out, err := cmd.Output()
			if err != nil {
				errs <- fmt.Errorf("tenant %d (%s): %w\n%s", i, s.group, err, stderr.String())
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				outs[i] = append(outs[i], sc.Text())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return outs
}

// windows parses "win <i> <kernels>" lines into kernels per window.
func windows(lines []string) map[int]int {
	w := map[int]int{}
	for _, l := range lines {
		var i, n int
		if c, _ := fmt.Sscanf(l, "win %d %d", &i, &n); c == 2 {
			w[i] = n
		}
	}
	return w
}

// shareResult is what a shares run measured over full 1 s windows.
type shareResult struct {
	worstWork float64 // worst |GPU work share - configured share|, percentage points
	worstHeld float64 // the same for the time the daemon granted
	minBusy   float64 // least fraction of a window the GPU ran kernels
}

// sharesRun runs busy (even) and sync-after-every-kernel (odd) tenants with
// slices 5, 10, 15 ms (repeating) for secs seconds.
func sharesRun(t testing.TB, e *e2e, n int, secs int) shareResult {
	cfg := testCfg(t)
	cfg.Policy = slice.DefaultConfig()
	startDaemon(t, cfg)
	var specs []tenantSpec
	kernel, slices := make([]float64, n), make([]float64, n)
	var total float64
	for i := range n {
		name := fmt.Sprintf("t%d", i)
		slices[i] = float64((i%3 + 1) * 5)
		total += slices[i]
		setGroup(t, cfg, name, group.Change{File: "slice", Value: fmt.Sprintf("%.0fms", slices[i])})
		mode, k := "busy", 500
		if i%2 == 1 {
			mode, k = "sync", 1000
		}
		kernel[i] = float64(k) / 1e6
		specs = append(specs, tenantSpec{name, []string{"--mode", mode, "--kernel-us", strconv.Itoa(k), "--seconds", strconv.Itoa(secs)}})
	}
	held := make(chan []map[string]int64, 1)
	t0 := time.Now().Add(1500 * time.Millisecond)
	go func() { held <- sampleHeld(cfg, t0, secs) }()
	outs := e.run(t, cfg, filepath.Join(cfg.RunDir, "sim.state"), specs, t0)
	samples := <-held
	if testing.Verbose() {
		t.Logf("kernels per window: %q; granted ns: %v", outs, samples)
	}
	r := shareResult{minBusy: 1}
	for win := 1; win < secs; win++ { // window 0 includes connecting
		work := make([]float64, n)
		var sum float64
		for i := range n {
			work[i] = float64(windows(outs[i])[win]) * kernel[i]
			sum += work[i]
		}
		r.minBusy = min(r.minBusy, sum)
		var heldSum float64
		for i := range n {
			heldSum += float64(samples[win+1][fmt.Sprintf("t%d", i)] - samples[win][fmt.Sprintf("t%d", i)])
		}
		for i := range n {
			want := slices[i] / total
			d := samples[win+1][fmt.Sprintf("t%d", i)] - samples[win][fmt.Sprintf("t%d", i)]
			r.worstWork = max(r.worstWork, 100*abs(work[i]/sum-want))
			r.worstHeld = max(r.worstHeld, 100*abs(float64(d)/heldSum-want))
		}
	}
	return r
}

func abs(x float64) float64 { return max(x, -x) }

// sampleHeld reads the daemon's cumulative granted time per group at t0 + k s.
func sampleHeld(cfg Config, t0 time.Time, secs int) []map[string]int64 {
	out := make([]map[string]int64, secs+1)
	for k := range secs + 1 {
		time.Sleep(time.Until(t0.Add(time.Duration(k) * time.Second)))
		out[k] = map[string]int64{}
		if st, err := ReadStatus(cfg.RunDir); err == nil {
			for _, g := range st.GPUs {
				for _, e := range g.Groups {
					out[k][e.Group] = e.AchievedNs
				}
			}
		}
	}
	return out
}

// TestE2EShares: a busy and a synchronizing tenant with 5 ms and 10 ms slices
// share the simulated GPU one third to two thirds: the time the daemon grants
// within 3 points per 1 s window, the kernels run within 8 (they also depend
// on CPU time on a busy test machine), and the GPU stays at least 85% busy.
// The benchmarks (make bench-node) report the figures for 2, 4 and 8 tenants.
// Timing on a shared machine is noisy (a tenant starved of CPU cannot keep
// the GPU busy): the run is tried twice and one must meet every bound.
func TestE2EShares(t *testing.T) {
	e := setupE2E(t)
	requireSharedSim(t, e)
	var r shareResult
	for attempt := 1; attempt <= 2; attempt++ {
		r = sharesRun(t, e, 2, 4)
		t.Logf("attempt %d, 2 tenants end to end: worst share error %.2f pp (kernels run), %.2f pp (time granted); GPU busy >= %.1f%%",
			attempt, r.worstWork, r.worstHeld, r.minBusy*100)
		if r.worstHeld <= 3 && r.worstWork <= 8 && r.minBusy >= 0.85 {
			return
		}
	}
	t.Fatalf("share errors %.2f pp granted (want <= 3), %.2f pp run (want <= 8), GPU busy %.1f%% (want >= 85%%)",
		r.worstHeld, r.worstWork, r.minBusy*100)
}

// TestE2EDaemonAbsentThenBack: with no daemon the tenant runs ungated and says
// so once; when a daemon appears, the gate reconnects and says so.
func TestE2EDaemonAbsentThenBack(t *testing.T) {
	e := setupE2E(t)
	cfg := testCfg(t)
	setGroup(t, cfg, "lone")
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	defer func() { // the daemon stops before the run directory is removed
		cancel()
		<-stopped
	}()
	go func() {
		defer close(stopped)
		select {
		case <-time.After(2500 * time.Millisecond): // the tenant starts at +1.5 s and runs 3 s
		case <-ctx.Done():
			return
		}
		if err := Run(ctx, cfg); err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()
	cmd := exec.Command(e.tenant, "--mode", "sync", "--kernel-us", "200", "--seconds", "3",
		"--t0", strconv.FormatInt(time.Now().Add(1500*time.Millisecond).UnixNano(), 10))
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+e.preload, "LD_LIBRARY_PATH="+e.sim,
		"GPUSLICE_SIM_STATE="+filepath.Join(cfg.RunDir, "sim.state"), EnvSocket+"="+cfg.Socket,
		"GPUSLICE_GROUP_FILE="+paths.GroupStateFile(cfg.RunDir, "lone"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tenant: %v\n%s", err, stderr.String())
	}
	msg := stderr.String()
	if strings.Count(msg, "not reachable") != 1 || !strings.Contains(msg, "is back") {
		t.Fatalf("stderr %q: want one 'not reachable' line and one 'is back' line", msg)
	}
	if w := windows(strings.Split(string(out), "\n")); w[0] == 0 || w[1] == 0 || w[2] == 0 {
		t.Fatalf("tenant did not run throughout: %v", w)
	}
}

// requireSharedSim skips when the simulated GPU cannot serve two processes at
// once (a known simulator defect: its state file lock outlives cuInit).
func requireSharedSim(t testing.TB, e *e2e) {
	t.Helper()
	state := filepath.Join(t.TempDir(), "probe.state")
	var cmds []*exec.Cmd
	for range 2 {
		cmd := exec.Command(e.tenant, "--mode", "sync", "--kernel-us", "100", "--seconds", "0.2")
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+e.sim, "GPUSLICE_SIM_STATE="+state)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	timer := time.AfterFunc(10*time.Second, func() {
		for _, c := range cmds {
			_ = c.Process.Kill() //nolint:errcheck // may have exited
		}
	})
	defer timer.Stop()
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Skipf("the simulated GPU at %s does not serve two processes at once (%v): "+
				"test/simgpu/src/statefile.c keeps its flock while the state file is mapped", e.sim, err)
		}
	}
}
