//go:build timeslicee2e

package timeslicee2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/proto"

	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// The daemon under a hostile local client (docs/timeslice.md, "Bounds"). These
// tests run in `make test-reliability`.

const nobody = 65534

// TestReliabilityConnFlood: 10,000 connections that say hello, from one
// unprivileged user, cost the daemon at most MaxConnsPerUID threads; the rest
// are refused with a busy error frame, and another user is served.
func TestReliabilityConnFlood(t *testing.T) {
	const n = 10000
	cfg := testCfg(t)
	openToAll(t, cfg)
	before := threads(t)
	startDaemon(t, cfg)
	flood := startChildAs(t, cfg, nobody, "flood", "GS_N="+strconv.Itoa(n))
	line := flood.expect(t, "flood ", 3*time.Minute)
	// Exactly the cap is served; every other connection is refused, by a busy
	// frame or (when the daemon closed it before the frame could be read) by
	// its end; nothing else happens to any of them.
	var welcomed, refused, closed, other int
	if _, err := fmt.Sscanf(line, "flood welcomed %d refused %d closed %d other %d", &welcomed, &refused, &closed, &other); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if welcomed != cfg.MaxConnsPerUID || refused+closed != n-cfg.MaxConnsPerUID || other != 0 {
		t.Fatalf("%q: want %d welcomed and the other %d refused or closed", line, cfg.MaxConnsPerUID, n-cfg.MaxConnsPerUID)
	}
	if th := threads(t) - before; th > cfg.MaxConnsPerUID+64 {
		t.Fatalf("the daemon holds %d more threads for %d admitted connections", th, cfg.MaxConnsPerUID)
	}
	c, err := client.Dial(context.Background(), cfg.Socket) // root, during the flood
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck // test
	if _, err := c.Acquire(testGPU); err != nil {
		t.Fatal(err)
	}
}

// TestReliabilityConnFloodContainerRoot: root in a pid namespace of its own
// (a container running as root, its processes in no group) is bounded per
// namespace like a user: its flood takes MaxConnsPerUID slots, not every slot
// (it did: root was exempt), and root beside the daemon and another
// container are still served.
func TestReliabilityConnFloodContainerRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs clients in pid namespaces of their own (unshare -p)")
	}
	cfg := testCfg(t)
	cfg.MaxConns, cfg.MaxConnsPerUID = 64, 16
	startDaemon(t, cfg)
	container := func(mode string, env ...string) *childProc {
		cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", os.Args[0], "-test.run=^$")
		return startChildCmd(t, cmd, cfg, mode, "", env...)
	}
	line := container("flood", "GS_N=200").expect(t, "flood ", time.Minute)
	var welcomed, refused, closed, other int
	if _, err := fmt.Sscanf(line, "flood welcomed %d refused %d closed %d other %d", &welcomed, &refused, &closed, &other); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if welcomed != cfg.MaxConnsPerUID || refused+closed != 200-cfg.MaxConnsPerUID || other != 0 {
		t.Fatalf("%q: want %d welcomed and the other %d refused or closed", line, cfg.MaxConnsPerUID, 200-cfg.MaxConnsPerUID)
	}
	if l := container("dial").expect(t, "dial", 10*time.Second); !strings.HasPrefix(l, "dial ok ") {
		t.Errorf("another container during the flood: %q, want dial ok", l)
	}
	c, err := client.Dial(context.Background(), cfg.Socket) // root beside the daemon
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReliabilityConnBounds: the per-group and total bounds refuse politely
// too (a busy error frame: IsBusy), and a slot is free again once its
// connection closes.
func TestReliabilityConnBounds(t *testing.T) {
	cfg := testCfg(t)
	cfg.MaxConns, cfg.MaxConnsPerGroup = 5, 3
	setGroup(t, cfg, "g")
	setGroup(t, cfg, "h")
	startDaemon(t, cfg)
	ctx := context.Background()
	var held []*client.Client
	defer func() {
		for _, c := range held {
			c.Close() //nolint:errcheck // test
		}
	}()
	for i := range 3 { // this process's own group: pid-<pid>
		c, err := client.Dial(ctx, cfg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if i == 0 {
			waitProbeGone(t, cfg)
		}
	}
	if _, err := client.Dial(ctx, cfg.Socket); !client.IsBusy(err) {
		t.Fatalf("4th connection of one group: %v, want a busy refusal", err)
	}
	for range 2 { // group g: the total is reached
		startChild(t, cfg, "hold", "g").expect(t, "granted", 10*time.Second)
	}
	if l := startChild(t, cfg, "dial", "h").expect(t, "dial", 10*time.Second); l != "dial busy" {
		t.Fatalf("a 6th connection: %q, want dial busy", l)
	}
	if err := held[0].Close(); err != nil {
		t.Fatal(err)
	}
	held = held[1:]
	// The daemon frees the slot when it sees the close: wait for that.
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := client.Dial(ctx, cfg.Socket)
		if err == nil {
			held = append(held, c)
			break
		}
		if !client.IsBusy(err) || time.Now().After(deadline) {
			t.Fatalf("after a close: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitProbeGone waits until the daemon no longer counts startDaemon's probe
// connection (it counts in this process's group until the daemon reads its
// close): for a status written after this process's first welcomed
// connection (accepted after the probe) that counts only that one.
func waitProbeGone(t *testing.T, cfg timeslice.Config) {
	t.Helper()
	since := time.Now()
	for deadline := since.Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, err := nodestatus.Read(cfg.RunDir); err == nil && st.Time.After(since) && st.Connections == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon still counts the start-up probe's connection")
		}
	}
}

// TestReliabilityUnknownGPU: a client asking for GPUs the driver does not
// list is refused (ErrLimit) and creates no scheduler: 64 made-up GPU IDs do
// not lock the node's GPUs out.
func TestReliabilityUnknownGPU(t *testing.T) {
	cfg := testCfg(t)
	startDaemon(t, cfg)
	for range 2 {
		l := startChild(t, cfg, "unknown-gpus", "").expect(t, "unknown-gpu", 10*time.Second)
		if l != "unknown-gpu refused "+strconv.Itoa(int(proto.ErrLimit)) {
			t.Fatalf("%q, want a refusal with code %d", l, proto.ErrLimit)
		}
	}
	c, err := client.Dial(context.Background(), cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck // test
	if _, err := c.Acquire(testGPU); err != nil {
		t.Fatalf("a GPU of the node after the made-up ones: %v", err)
	}
}

// TestReliabilityHugeSettingFile: a 50 MB setting file is refused after
// reading at most group.MaxFileSize+1 bytes of it; the log line quotes a
// short prefix at most, and the last valid settings are written back.
func TestReliabilityHugeSettingFile(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "big", group.Change{File: group.FileSlice, Value: "7ms"})
	var mu sync.Mutex
	var longest int
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		longest = max(longest, len(prefix)+len(args))
		mu.Unlock()
	}, funcr.Options{Verbosity: 10})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- timeslice.Run(ctx, cfg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitUp(t, cfg)
	huge := bytes.Repeat([]byte("9"), 50<<20)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	file := filepath.Join(group.NewTree(cfg.RunDir).Path("big"), group.FileSlice)
	if err := os.WriteFile(file, huge, 0o644); err != nil {
		t.Fatal(err)
	}
	// The daemon writes the last valid value back: wait for it.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		head, err := readHead(file) // not the 50 MB: this process's allocations are measured
		if err == nil && head == "7ms\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last valid slice was not written back (%q... there)", head)
		}
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("the daemon allocated %d MiB for a 50 MiB setting file", alloc>>20)
	}
	mu.Lock()
	defer mu.Unlock()
	if longest > 2048 {
		t.Errorf("a log line of %d bytes", longest)
	}
}

// waitUp waits until a daemon answers on cfg's socket.
func waitUp(t testing.TB, cfg timeslice.Config) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !client.Reachable(context.Background(), cfg.Socket); {
		if time.Now().After(deadline) {
			t.Fatal("daemon did not come up")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReliabilityGroupFileOwner: a user cannot join another user's group by
// naming its file in GPUSLICE_GROUP_FILE (the kernel's uid must own the
// group's directory); in a group directory of its own it is placed there.
func TestReliabilityGroupFileOwner(t *testing.T) {
	cfg := testCfg(t)
	openToAll(t, cfg)
	setGroup(t, cfg, "vip", group.Change{File: group.FilePriority, Value: "high"})
	setGroup(t, cfg, "mine")
	if err := os.Chown(group.NewTree(cfg.RunDir).Path("mine"), nobody, nobody); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, cfg)
	for _, tc := range []struct{ grp, want string }{{"vip", "pid-"}, {"mine", "mine"}} {
		p := startChildAs(t, cfg, nobody, "dial", "GPUSLICE_GROUP_FILE="+groupstate.Path(cfg.RunDir, tc.grp))
		l := p.expect(t, "dial", 10*time.Second)
		if !strings.HasPrefix(l, "dial ok "+tc.want) {
			t.Errorf("nobody naming group %s: %q, want dial ok %s...", tc.grp, l, tc.want)
		}
	}
	// In a user and mount namespace of its own (any user may make them: the
	// view is the one it had), nobody is still not root nor vip's owner.
	cmd := exec.Command("unshare", "--user", "--map-root-user", "--mount", sharedTestBinary(t), "-test.run=^$")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	p := startChildCmd(t, cmd, cfg, "dial", "", "GPUSLICE_GROUP_FILE="+groupstate.Path(cfg.RunDir, "vip"))
	if l := p.expect(t, "dial", 10*time.Second); !strings.HasPrefix(l, "dial ok pid-") {
		t.Errorf("nobody in namespaces of its own naming group vip: %q, want dial ok pid-...", l)
	}
}

// TestReliabilityContainerGroupFile: a process in a mount namespace of its
// own (a container) is placed in the group its file names only if the
// group's directory is what it sees at that path (mounted into it); naming
// another container's group gets it a group of its own.
func TestReliabilityContainerGroupFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs a client in a mount namespace of its own (unshare -m)")
	}
	cfg := testCfg(t)
	setGroup(t, cfg, "victim", group.Change{File: group.FilePriority, Value: "high"})
	startDaemon(t, cfg)
	tree := group.NewTree(cfg.RunDir)
	for _, tc := range []struct {
		name, script, want string
	}{
		// Its own mount namespace, the group directory as on the host: accepted.
		{"mounted", "exec \"$0\" -test.run='^$'", "victim"},
		// The path leads elsewhere in its namespace: another container's group.
		{"elsewhere", "mount -t tmpfs none \"$1\" && mkdir -p \"$1/victim\" && exec \"$0\" -test.run='^$'", "pid-"},
		// A link there whose absolute target names the host's directory: the
		// daemon resolves it in its own root, not the caller's.
		{"link", "mount -t tmpfs none \"$1\" && ln -s \"$1/victim\" \"$1/victim\" && exec \"$0\" -test.run='^$'", "pid-"},
	} {
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", tc.script, os.Args[0], tree.Dir)
		p := startChildCmd(t, cmd, cfg, "dial", "victim")
		if l := p.expect(t, "dial", 10*time.Second); !strings.HasPrefix(l, "dial ok "+tc.want) {
			t.Errorf("%s: %q, want dial ok %s...", tc.name, l, tc.want)
		}
	}
}

// TestReliabilityDaemonKilled: with a run supervising (Supervise, as every
// `gpuslice run` does while its command runs), a daemon killed with SIGKILL is
// started again and applies every group's settings from the tree.
func TestReliabilityDaemonKilled(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "kept", group.Change{File: group.FileSlice, Value: "7ms"})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := client.StartOptions{Exe: exe, Args: []string{"--run-dir", cfg.RunDir}, Env: os.Environ()}
	stopStartedDaemon(t, cfg)
	if err := client.EnsureRunning(context.Background(), cfg.Socket, start); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	supervised := make(chan struct{})
	go func() { defer close(supervised); client.Supervise(ctx, cfg.Socket, cfg.RunDir, start) }()
	defer func() { cancel(); <-supervised }()
	first := waitDaemonPID(t, cfg, 0)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	second := waitDaemonPID(t, cfg, first)
	t.Logf("daemon %d killed; daemon %d serving %v later", first, second, time.Since(killed))
	lines := startChild(t, cfg, "cycle", "kept", "GS_N=1").all(t, 10*time.Second)
	var grp string
	var t0, t1, sliceNs int64
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "grant ") {
		t.Fatalf("child printed %q", lines)
	}
	if _, err := fmt.Sscan(strings.TrimPrefix(lines[1], "grant "), &grp, &t0, &t1, &sliceNs); err != nil {
		t.Fatal(err)
	}
	if grp != "kept" || time.Duration(sliceNs) != 7*time.Millisecond {
		t.Fatalf("after the restart: group %s, slice %v; want kept, 7ms", grp, time.Duration(sliceNs))
	}
}

// waitDaemonPID waits for a daemon other than pid not to publish its status
// and answer on the socket, and returns its pid.
func waitDaemonPID(t testing.TB, cfg timeslice.Config, not int) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st, err := nodestatus.Read(cfg.RunDir)
		if err == nil && st.PID > 0 && st.PID != not && client.Reachable(context.Background(), cfg.Socket) {
			return st.PID
		}
		if time.Now().After(deadline) {
			t.Fatalf("no daemon other than %d came up: %v", not, err)
		}
	}
}

// readHead returns the first 16 bytes of a file.
func readHead(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	var b [16]byte
	n, err := f.Read(b[:])
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return string(b[:n]), err
}

// TestReliabilityHungDaemon: a daemon that accepts connections but never
// answers (stopped with SIGSTOP, stuck) holds a dial no longer than its
// context, and a supervising run (every `gpuslice run`) stops supervising when
// told to (it waited for the welcome for ever: the run never exited after its
// command, whatever signal it got).
func TestReliabilityHungDaemon(t *testing.T) {
	cfg := testCfg(t)
	hung := func(name string) (*net.UnixListener, string) { // a daemon that never answers
		socket := filepath.Join(cfg.RunDir, name)
		ln, err := net.ListenUnix(proto.Network, &net.UnixAddr{Name: socket, Net: proto.Network})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() }) //nolint:errcheck // also wakes a client still waiting
		return ln, socket
	}
	_, socket := hung("dial.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	dialed := make(chan error, 1)
	go func() { _, err := client.Dial(ctx, socket); dialed <- err }()
	select {
	case err := <-dialed:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Dial to a daemon that never answers: %v, want its context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Dial still waiting 10 s after its context's deadline")
	}
	ln, socket := hung("supervise.sock")
	sctx, stop := context.WithCancel(context.Background())
	supervised := make(chan struct{})
	start := client.StartOptions{Exe: "/bin/false"} // never started: the daemon is there
	go func() { defer close(supervised); client.Supervise(sctx, socket, cfg.RunDir, start) }()
	c, err := ln.AcceptUnix() // accepted, its hello read, never answered
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }() //nolint:errcheck // the peer is gone or going
	if _, err := c.Read(make([]byte, proto.FrameSize)); err != nil {
		t.Fatal(err)
	}
	stop()
	select {
	case <-supervised:
	case <-time.After(10 * time.Second):
		t.Error("Supervise still running 10 s after it was stopped")
	}
}
