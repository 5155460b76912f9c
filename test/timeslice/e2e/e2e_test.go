//go:build timeslicee2e

package timeslicee2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/monoclock"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/proto"
	"github.com/gpuslice/gpuslice/internal/testbin"

	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// End-to-end: real tenant processes (test/timeslice/tenant.c) launch kernels on the
// simulated GPU through bin/libgpuslice.so (LD_PRELOAD), gated by a daemon.
// Needs the build outputs: GPUSLICE_BIN (set by `make test`) or ../../../bin.
// GPUSLICE_NODE_SIMDIR overrides the driver directory (default <bin>/sim);
// GPUSLICE_NODE_PRELOAD overrides LD_PRELOAD (the ASan run in mk/node.mk).

type e2e struct {
	bin, sim, preload, tenant string
}

func repoRoot() string { return filepath.Join("..", "..", "..") }

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
			testbin.Missing(t, fmt.Sprintf("needs the build outputs (run make): %v", err))
		}
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		testbin.Missing(t, "needs a C compiler to build the tenant program")
	}
	e.tenant = filepath.Join(t.TempDir(), "gs-tenant")
	out, err := exec.Command(cc, "-std=c11", "-D_GNU_SOURCE", "-O2", "-I", filepath.Join(repoRoot(), "include"), "-o", e.tenant,
		filepath.Join(repoRoot(), "test/timeslice/tenant.c"), filepath.Join(repoRoot(), "apps/cuapi.c"), "-ldl").CombinedOutput()
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
func (e *e2e) run(t testing.TB, cfg timeslice.Config, simState string, specs []tenantSpec, start time.Time) [][]string {
	t.Helper()
	return e.runEnv(t, cfg, simState, specs, nil, start)
}

// runEnv is run with env[i] added to tenant i's environment (env may be nil).
func (e *e2e) runEnv(t testing.TB, cfg timeslice.Config, simState string, specs []tenantSpec, env [][]string,
	start time.Time) [][]string {
	t.Helper()
	t0 := start.UnixNano()
	outs := make([][]string, len(specs))
	var wg sync.WaitGroup
	errs := make(chan error, len(specs))
	for i, s := range specs {
		args := append([]string{"--t0", strconv.FormatInt(t0, 10)}, s.args...)
		cmd := exec.Command(e.tenant, args...)
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+e.preload, "LD_LIBRARY_PATH="+e.sim,
			"GPUSLICE_SIM_STATE="+simState, nodestatus.EnvSocket+"="+cfg.Socket, "GPUSLICE_RUN_DIR="+cfg.RunDir,
			"GPUSLICE_GROUP="+s.group, "GPUSLICE_GROUP_FILE="+groupstate.Path(cfg.RunDir, s.group))
		if i < len(env) {
			cmd.Env = append(cmd.Env, env[i]...)
		}
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
		if err := timeslice.Run(ctx, cfg); err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()
	cmd := exec.Command(e.tenant, "--mode", "sync", "--kernel-us", "200", "--seconds", "3",
		"--t0", strconv.FormatInt(time.Now().Add(1500*time.Millisecond).UnixNano(), 10))
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+e.preload, "LD_LIBRARY_PATH="+e.sim,
		"GPUSLICE_SIM_STATE="+filepath.Join(cfg.RunDir, "sim.state"), nodestatus.EnvSocket+"="+cfg.Socket,
		"GPUSLICE_GROUP_FILE="+groupstate.Path(cfg.RunDir, "lone"))
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
	if w := windows(strings.Split(string(out), "\n")); w[0].kernels == 0 || w[1].kernels == 0 || w[2].kernels == 0 {
		t.Fatalf("tenant did not run throughout: %v", w)
	}
}

// TestE2EGateEndsGrantOnItsOwn: the gate stops launching when its grant ends
// even if no revoke comes (the daemon here is a bare protocol peer that grants
// and then stays silent): it hands over (release with more work) after the
// end, never before, then launches nothing until the next grant. The gate
// announces FeatureSentAt (this machine's clock is the host's); the second
// grant says when it was sent (as the daemon does), the others do not (as
// daemons before it did).
func TestE2EGateEndsGrantOnItsOwn(t *testing.T) {
	e := setupE2E(t)
	p, acq, _ := e.protocolPeer(t, []string{"--mode", "busy", "--kernel-us", "500", "--seconds", "2"}, nil, nil)
	shared, err := monoclock.Shared("/proc")
	if shared && p.hello.Features&proto.FeatureSentAt == 0 {
		t.Fatalf("the gate's hello %+v does not announce FeatureSentAt", p.hello)
	}
	nc := p.c.Conn()
	const valid = 20 * time.Millisecond
	for seq := uint64(1); seq <= 3; seq++ {
		sent, sentAt := time.Now(), uint64(0)
		if seq == 2 && shared {
			sentAt = monoclock.Now()
		} else if seq == 2 {
			t.Logf("this process's CLOCK_MONOTONIC is not the host's (%v): no grant with sent_at", err)
		}
		p.send(&proto.Grant{GPU: acq.GPU, Seq: seq, SliceNs: uint64(valid), ValidNs: uint64(valid), SentAtNs: sentAt})
		rel := p.expect(&proto.Release{}).(*proto.Release)
		if now := monoclock.Now(); sentAt != 0 && now < sentAt+uint64(valid) {
			t.Errorf("grant %d handed back %v after sent_at, before its end", seq, time.Duration(now-sentAt))
		}
		held := time.Since(sent)
		t.Logf("grant %d: released after %v", seq, held)
		if rel.Seq != seq || rel.Flags&proto.ReleaseMore == 0 {
			t.Fatalf("release %+v, want seq %d with more work", rel, seq)
		}
		// Never before the end; after it, on its own (no revoke comes). How soon
		// after is CPU scheduling (the daemon's grace is 20 ms): a wall clock
		// the machine's load changes, so the bound here only catches a gate
		// that does not end the grant by itself at all.
		if held < valid || held > valid+time.Second {
			t.Errorf("grant %d of %v handed back after %v: want within [%v, %v]", seq, valid, held, valid, valid+time.Second)
		}
		// Withheld: the gate waits (sends nothing) until the next grant.
		if err := nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if m, err := p.c.Next(); err == nil {
			t.Fatalf("gate sent %T while waiting for a grant", m)
		}
		if err := nc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

type peer struct {
	t     *testing.T
	c     *client.Client
	hello *proto.Hello // the gate's
}

// protocolPeer starts the tenant program with args under libgpuslice, its
// daemon a bare protocol peer played by the test (socket in a fresh
// directory); env adds to the tenant's environment, prepare (if set) sees the
// command before it starts. It returns the peer after the hello and welcome,
// the tenant's first Acquire and its stderr. The tenant is killed at the end.
func (e *e2e) protocolPeer(t *testing.T, args, env []string, prepare func(*exec.Cmd)) (*peer, *proto.Acquire, *testbin.Output) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "peer.sock")
	ln, err := net.ListenUnix(proto.Network, &net.UnixAddr{Name: sock, Net: proto.Network})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() }) //nolint:errcheck // test
	cmd := exec.Command(e.tenant, args...)
	cmd.Env = append(append(os.Environ(), "LD_PRELOAD="+e.preload, "LD_LIBRARY_PATH="+e.sim,
		"GPUSLICE_SIM_STATE="+filepath.Join(dir, "sim.state"), nodestatus.EnvSocket+"="+sock), env...)
	var stderr testbin.Output // read while the tenant runs
	cmd.Stderr = &stderr
	if prepare != nil {
		prepare(cmd)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() }) //nolint:errcheck // may have exited
	if err := ln.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	nc, err := ln.AcceptUnix()
	if err != nil {
		t.Fatalf("the gate did not connect: %v\n%s", err, stderr.String())
	}
	p := &peer{t: t, c: client.New(nc)}
	if err := nc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	p.hello = p.expect(&proto.Hello{}).(*proto.Hello)
	p.send(&proto.Welcome{Features: proto.FeatureRevoke | p.hello.Features&proto.FeatureSentAt, PeriodNs: uint64(100 * time.Millisecond)})
	return p, p.expect(&proto.Acquire{}).(*proto.Acquire), &stderr
}

// expect reads the next message and checks its type.
func (p *peer) expect(want proto.Message) proto.Message {
	p.t.Helper()
	m, err := p.c.Next()
	if err != nil {
		p.t.Fatalf("want %T: %v", want, err)
	}
	if m.Type() != want.Type() {
		p.t.Fatalf("got %T, want %T", m, want)
	}
	return m
}

func (p *peer) send(m proto.Message) {
	p.t.Helper()
	if err := p.c.Send(m); err != nil {
		p.t.Fatal(err)
	}
}

// TestE2EGateSharesGroupGrantAfterHandBack: a member that handed its group's
// grant back (idle) and asks again while its siblings still hold it is sent
// the same grant (same seq) again, as the daemon's join does. The gate must
// take it: only a renewal of a seq handed back is stale. (A gate that ignored
// every grant of the seq it last released waited out the gate timeout: the
// stranded members of a 300-process group.)
func TestE2EGateSharesGroupGrantAfterHandBack(t *testing.T) {
	e := setupE2E(t)
	p, acq, stderr := e.protocolPeer(t, []string{"--mode", "requests", "--kernel-us", "200", "--n", "5",
		"--gap-ms", "100", "--seconds", "30"}, []string{"GPUSLICE_GATE_TIMEOUT_MS=60000"}, nil)
	grant := &proto.Grant{GPU: acq.GPU, Seq: 1, SliceNs: uint64(10 * time.Second), ValidNs: uint64(10 * time.Second)}
	p.send(grant)
	for round := range 3 {
		rel := p.expect(&proto.Release{}).(*proto.Release)
		if rel.Seq != 1 || rel.Flags&proto.ReleaseMore != 0 {
			t.Fatalf("round %d: release %+v, want seq 1 handed back idle", round, rel)
		}
		p.expect(&proto.Acquire{}) // the next request
		p.send(grant)              // the group still holds seq 1: the member shares it again
	}
	// A renewal of seq 1 after it was handed back crossed the release: stale.
	rel := p.expect(&proto.Release{}).(*proto.Release)
	if rel.Seq != 1 {
		t.Fatalf("release %+v, want seq 1", rel)
	}
	p.send(&proto.Grant{GPU: acq.GPU, Seq: 1, SliceNs: grant.SliceNs, ValidNs: grant.ValidNs, Flags: proto.GrantRenewal})
	p.expect(&proto.Acquire{}) // the renewal did not count as a grant: the next request asks
	if strings.Contains(stderr.String(), "has not granted") {
		t.Fatalf("stderr %q", stderr.String())
	}
}

// TestE2EGateHandsBackWhileLauncherComputes: a holder whose launching thread
// runs CPU work between requests (it spins, runnable the whole time, but
// gets its CPU) launched nothing because it has nothing to launch: the gate
// hands the grant back as idle, without "more", long before the grant ends.
// Only a launcher that waited for a CPU for most of the idle window keeps
// its grant (the gate's launcher_starved; unit_parse_test covers the rule).
// Before, a runnable launcher kept it to the end (8 s here) and then said
// "more".
func TestE2EGateHandsBackWhileLauncherComputes(t *testing.T) {
	e := setupE2E(t)
	p, acq, stderr := e.protocolPeer(t, []string{"--mode", "requests", "--kernel-us", "200", "--n", "5",
		"--gap-ms", "300", "--gap-spin", "1", "--seconds", "30"}, []string{"GPUSLICE_GATE_TIMEOUT_MS=60000"}, nil)
	grant := &proto.Grant{GPU: acq.GPU, Seq: 1, SliceNs: uint64(8 * time.Second), ValidNs: uint64(8 * time.Second)}
	start := time.Now()
	p.send(grant)
	rel := p.expect(&proto.Release{}).(*proto.Release)
	if rel.Seq != 1 || rel.Flags&proto.ReleaseMore != 0 {
		t.Fatalf("release after %v: %+v, want seq 1 handed back idle (no more work)\n%s", time.Since(start), rel, stderr.String())
	}
}
