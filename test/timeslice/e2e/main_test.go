//go:build timeslicee2e

package timeslicee2e

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/monoclock"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/proto"

	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// The test binary doubles as the processes the daemon serves: with
// GS_NODE_TEST_CHILD set it runs one client behaviour and exits; started as
// "<test binary> node ..." (by EnsureRunning) it is a daemon.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "node" {
		os.Exit(childDaemon(os.Args[2:]))
	}
	if mode := os.Getenv("GS_NODE_TEST_CHILD"); mode != "" {
		if err := childClient(mode); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(runWithOwnSimState(m))
}

// runWithOwnSimState runs the tests with a simulated-GPU state file of their
// own (GPUSLICE_SIM_STATE, unless set; the tenants of a run name theirs): the
// simulator's default, /dev/shm/gpuslice-sim-v<N>-<uid>, is every process's on
// the machine, and another holding it with another device configuration (or a
// GPU it marked lost) failed the daemons' NVML listing here ("in use by pid N
// with a different device configuration": every grant refused).
func runWithOwnSimState(m *testing.M) int {
	if os.Getenv("GPUSLICE_SIM_STATE") != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "gs-e2e-sim-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "simulated GPU state:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }() //nolint:errcheck // a temporary directory
	if err := os.Setenv("GPUSLICE_SIM_STATE", filepath.Join(dir, "sim.state")); err != nil {
		fmt.Fprintln(os.Stderr, "simulated GPU state:", err)
		return 1
	}
	return m.Run()
}

var testGPU = proto.UUID{0x6a, 1, 2, 3}

// testGPUs are the GPUs test daemons know besides the simulated GPU's:
// testGPU and 0x70,i (a GPU of its own per benchmark client).
func testGPUs() []proto.UUID {
	out := []proto.UUID{testGPU}
	for i := range 16 {
		out = append(out, proto.UUID{0x70, byte(i)})
	}
	return out
}

// testLister lists testGPUs and, when it is built, the simulated GPU's (the
// end-to-end tenants run on it), through NVML as the daemon does.
func testLister() func() ([]proto.UUID, error) {
	dir := os.Getenv("GPUSLICE_NODE_SIMDIR")
	if dir == "" {
		bin := os.Getenv("GPUSLICE_BIN")
		if bin == "" {
			bin = filepath.Join(repoRoot(), "bin")
		}
		dir = filepath.Join(bin, "sim")
	}
	sim := timeslice.DriverGPUs(gpu.ModeSim, dir)
	_, err := os.Stat(filepath.Join(dir, "libnvidia-ml.so.1"))
	return func() ([]proto.UUID, error) {
		if err != nil {
			return testGPUs(), nil
		}
		uuids, err := sim()
		return append(testGPUs(), uuids...), err
	}
}

// testCfg is a daemon config in a fresh run directory with short slices.
func testCfg(t testing.TB) timeslice.Config {
	dir := t.TempDir()
	cfg := timeslice.DefaultConfig(func(k string) string {
		if k == "GPUSLICE_RUN_DIR" {
			return dir
		}
		return ""
	})
	cfg.Socket = filepath.Join(dir, "node.sock")
	cfg.ListGPUs = testLister()
	cfg.StatusEvery = 50 * time.Millisecond
	cfg.Policy.DefaultSlice = 5 * time.Millisecond
	cfg.Policy.Grace = 30 * time.Millisecond
	return cfg
}

func childDaemon(args []string) int {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	socket := fs.String("socket", "", "")
	ifNot := fs.Bool("if-not-running", false, "")
	runDir := fs.String("run-dir", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := timeslice.DefaultConfig(os.Getenv)
	cfg.ListGPUs = testLister()
	cfg.Socket = *socket
	if *runDir != "" {
		cfg.RunDir = *runDir
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := timeslice.Run(ctx, cfg)
	switch {
	case err == nil, errors.Is(err, timeslice.ErrRunning) && *ifNot:
		if err != nil {
			fmt.Println("lost the race")
		}
		return 0
	case errors.Is(err, timeslice.ErrRunning):
		return 3
	}
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// childClient behaviours, configured by env:
//
//	hold:  acquire, print "granted", then sleep until killed.
//	cycle: GS_N grants, each held until it ends, released with more work;
//	       prints "grant <group> <startNs> <endNs> <sliceNs>" per grant.
//	ensure: EnsureRunning(<this binary> node ...), then print "up".
//	grants: GS_CLIENTS connections (goroutines), each on a GPU of its own,
//	       take GS_N grants each (bench_test.go), printing as gs-grantbench.
func childClient(mode string) error {
	ctx := context.Background()
	socket := os.Getenv(nodestatus.EnvSocket)
	switch mode {
	case "ensure":
		return ensureChild(ctx, socket)
	case "grants":
		return grantsChild(ctx, socket)
	case "flood":
		return floodChild(socket)
	case "unknown-gpus":
		return unknownGPUsChild(socket)
	case "map-state":
		return mapStateChild(os.Getenv("GS_MAP"))
	case "mig-make":
		return migMakeChild(os.Getenv("GS_SIMDIR"))
	}
	c, err := client.Dial(ctx, socket)
	if mode == "dial" {
		switch {
		case client.IsBusy(err):
			fmt.Println("dial busy")
			return nil
		case err != nil:
			return err
		}
		fmt.Println("dial ok", c.Group)
		return c.Close()
	}
	if err != nil {
		return err
	}
	fmt.Println("group", c.Group)
	switch mode {
	case "hold":
		g, err := c.Acquire(testGPU)
		if err != nil {
			return err
		}
		fmt.Println("granted", g.Seq)
		time.Sleep(time.Hour)
	case "online":
		return onlineChild(c)
	case "cycle", "redial":
		return cycleChild(ctx, c, socket, mode == "redial")
	}
	return c.Close()
}

// ensureChild starts a daemon unless one runs (client.EnsureRunning).
func ensureChild(ctx context.Context, socket string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if err := client.EnsureRunning(ctx, socket, client.StartOptions{Exe: exe, Env: os.Environ()}); err != nil {
		return err
	}
	fmt.Println("up")
	return nil
}

// onlineChild banks a slice, then asks again while someone else holds the
// GPU (the test says when, on stdin).
func onlineChild(c *client.Client) error {
	g, err := c.Acquire(testGPU)
	if err != nil {
		return err
	}
	if err := c.Release(testGPU, g.Seq, false); err != nil {
		return err
	}
	fmt.Println("banked")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("wait for go: %w", err)
	}
	if g, err = c.Acquire(testGPU); err != nil {
		return err
	}
	fmt.Println("grant", g.Flags&proto.GrantPreempt != 0, time.Duration(g.ValidNs) > time.Duration(g.SliceNs))
	return c.Close()
}

// cycleChild takes $GS_N grants (cycle). With redial it then leaves the GPU
// (the group's last connection) and comes back for one more grant. The
// daemon may see the new connection before the old one's hand-back: the new
// member then shares the grant the group still holds, which is not a new
// grant (cycle skips it).
func cycleChild(ctx context.Context, c *client.Client, socket string, redial bool) error {
	var n int
	if _, err := fmt.Sscan(os.Getenv("GS_N"), &n); err != nil {
		return fmt.Errorf("GS_N: %w", err)
	}
	last, err := cycle(c, n, 0)
	if err != nil || !redial {
		return err
	}
	if c, err = client.Dial(ctx, socket); err != nil {
		return err
	}
	_, err = cycle(c, 1, last)
	return err
}

// cycle takes n grants, holding each to its end, and prints them ("grant
// <group> <start> <end> <slice> <clock>": CLOCK_MONOTONIC ns, by the daemon's
// clock where the grant says when it was sent: clock "daemon", else "read"); a grant
// with sequence number skip (one the group already had) is handed back
// unprinted, and one it just handed back is not taken again. It returns the
// last grant's sequence number.
func cycle(c *client.Client, n int, skip uint64) (uint64, error) {
	if err := c.Send(&proto.Acquire{GPU: testGPU}); err != nil {
		return 0, err
	}
	var seq uint64
	for i := 0; i < n; {
		g, err := c.WaitHeld()
		if err != nil {
			return 0, err
		}
		if skip != 0 && g.Seq == skip {
			if err := c.Release(testGPU, g.Seq, true); err != nil {
				return 0, err
			}
			continue
		}
		if seq != 0 && g.Seq == seq {
			// The grant just handed back, again: the daemon's answer to a
			// release of the one before it that came after it had handed
			// this one out (the client read it late). The release of this
			// one, sent already, answers it too.
			continue
		}
		if now := monoclock.Now(); g.End > now {
			time.Sleep(time.Duration(g.End - now))
		}
		clock := "read"
		if g.DaemonClock() {
			clock = "daemon"
		}
		fmt.Println("grant", c.Group, g.Start, g.End, g.SliceNs, clock)
		i++
		if err := c.Release(testGPU, g.Seq, i < n); err != nil {
			return 0, err
		}
		seq = g.Seq
	}
	return seq, c.Close()
}

// startDaemon runs a daemon in this process until the test ends.
func startDaemon(t testing.TB, cfg timeslice.Config) {
	t.Helper()
	ctx := context.Background()
	if _, bench := t.(*testing.B); bench { // info lines would split the benchmark's result lines
		ctx = klog.NewContext(ctx, klog.Background().V(10))
	}
	stop := startDaemonCtx(t, ctx, cfg)
	t.Cleanup(stop)
}

// startDaemonCtx runs a daemon in this process (logging to ctx's logger)
// until stop, which reports its error.
func startDaemonCtx(t testing.TB, ctx context.Context, cfg timeslice.Config) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- timeslice.Run(ctx, cfg) }()
	// A bound for a daemon that never comes up, not a speed check: CPU-starved,
	// one takes seconds.
	deadline := time.Now().Add(time.Minute)
	for !client.Reachable(ctx, cfg.Socket) {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("daemon exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("daemon did not come up")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("daemon: %v", err)
			}
		})
	}
}

// child starts the test binary as a client process in group (if not "").
type childProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser // the child's standard input
	lines chan string
	done  chan error
}

func startChild(t testing.TB, cfg timeslice.Config, mode, grp string, env ...string) *childProc {
	t.Helper()
	return startChildCmd(t, exec.Command(os.Args[0], "-test.run=^$"), cfg, mode, grp, env...)
}

func startChildCmd(t testing.TB, cmd *exec.Cmd, cfg timeslice.Config, mode, grp string, env ...string) *childProc {
	t.Helper()
	cmd.Env = append(os.Environ(), "GS_NODE_TEST_CHILD="+mode, nodestatus.EnvSocket+"="+cfg.Socket,
		"GPUSLICE_RUN_DIR="+cfg.RunDir)
	if grp != "" {
		cmd.Env = append(cmd.Env, "GPUSLICE_GROUP_FILE="+groupstate.Path(cfg.RunDir, grp))
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &childProc{cmd: cmd, stdin: stdin, lines: make(chan string, 1000), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.done <- cmd.Wait()
	}()
	// Kill, not a look at cmd.ProcessState: the goroutine above sets it in
	// Wait. Kill after Wait is a no-op (os.ErrProcessDone), never another pid.
	t.Cleanup(func() { _ = cmd.Process.Kill() }) //nolint:errcheck // may have exited already
	return p
}

// expect waits for a line starting with prefix.
func (p *childProc) expect(t testing.TB, prefix string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("child exited before printing %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("child did not print %q within %v", prefix, within)
		}
	}
}

func (p *childProc) all(t testing.TB, within time.Duration) []string {
	t.Helper()
	var out []string
	deadline := time.After(within)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				if err := <-p.done; err != nil {
					t.Fatalf("child: %v", err)
				}
				return out
			}
			out = append(out, l)
		case <-deadline:
			t.Fatalf("child did not finish within %v", within)
		}
	}
}

func setGroup(t testing.TB, cfg timeslice.Config, name string, changes ...group.Change) {
	t.Helper()
	if _, err := group.NewTree(cfg.RunDir).Set(name, changes); err != nil {
		t.Fatal(err)
	}
}
