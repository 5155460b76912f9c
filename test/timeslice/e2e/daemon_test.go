//go:build timeslicee2e

package timeslicee2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/proto"

	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// interval is one "grant" line of a cycle child: start and end on
// CLOCK_MONOTONIC (ns), by the daemon's clock where clock is "daemon".
type interval struct {
	group      string
	start, end int64
	slice      time.Duration
	clock      string
}

func parseGrants(t *testing.T, lines []string) []interval {
	t.Helper()
	var out []interval
	for _, l := range lines {
		var iv interval
		var slice int64
		if n, _ := fmt.Sscanf(l, "grant %s %d %d %d %s", &iv.group, &iv.start, &iv.end, &slice, &iv.clock); n == 5 {
			iv.slice = time.Duration(slice)
			out = append(out, iv)
		}
	}
	return out
}

// Two processes in two groups (identified from the group file they were
// started with) take turns: grants never overlap, each gets its group's slice.
// Each grant runs from when the daemon sent it to where the client ends it
// (the daemon's clock: a grant read late ends when the daemon ends it), so
// the check does not depend on when the clients run, only on what the daemon
// hands out and what the clients do with it.
func TestGroupsTakeTurns(t *testing.T) {
	needHostClock(t)
	cfg := testCfg(t)
	setGroup(t, cfg, "a", group.Change{File: "slice", Value: "4ms"})
	setGroup(t, cfg, "b", group.Change{File: "slice", Value: "8ms"})
	startDaemon(t, cfg)
	a := startChild(t, cfg, "cycle", "a", "GS_N=20")
	b := startChild(t, cfg, "cycle", "b", "GS_N=20")
	// Bounds for a child that hangs, not speed checks: 20 grants take 0.3 s
	// idle, tens of seconds CPU-starved.
	la, lb := a.all(t, 2*time.Minute), b.all(t, 2*time.Minute)
	if la[0] != "group a" || lb[0] != "group b" {
		t.Fatalf("groups: %q, %q", la[0], lb[0])
	}
	all := append(parseGrants(t, la), parseGrants(t, lb)...)
	if len(all) != 40 {
		t.Fatalf("%d grants, want 40", len(all))
	}
	checkTurns(t, all, map[string]time.Duration{"a": 4 * time.Millisecond, "b": 8 * time.Millisecond})
}

// checkTurns: every grant is timed by the daemon's clock, none overlaps the
// next (sorted by start), none is over its group's slice, and each group was
// given its whole slice at least once.
func checkTurns(t *testing.T, all []interval, slice map[string]time.Duration) {
	t.Helper()
	slices.SortFunc(all, func(x, y interval) int { return cmp.Compare(x.start, y.start) })
	longest := map[string]time.Duration{}
	for i, iv := range all {
		if iv.clock != "daemon" {
			t.Fatalf("grant %d of %s timed from its reading, not by the daemon's clock: %+v", i, iv.group, iv)
		}
		// Holding to the very end overruns by the socket latency (and any
		// scheduling delay): the overrun is repaid from the next slice.
		if iv.slice > slice[iv.group] {
			t.Errorf("grant %d of %s: slice %v, over %v", i, iv.group, iv.slice, slice[iv.group])
		}
		longest[iv.group] = max(longest[iv.group], iv.slice)
		if i > 0 && iv.start < all[i-1].end {
			t.Fatalf("grants overlap by %v: %+v and %+v", time.Duration(all[i-1].end-iv.start), all[i-1], iv)
		}
	}
	if !maps.Equal(longest, slice) {
		t.Fatalf("longest slices %v, want %v", longest, slice)
	}
}

// A process killed while holding the GPU loses its grant at once: the next
// process does not wait for the (long) slice to end.
func TestKilledHolderLosesGrant(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "long", group.Change{File: "slice", Value: "5s"})
	startDaemon(t, cfg)
	holder := startChild(t, cfg, "hold", "long")
	holder.expect(t, "granted", 5*time.Second)
	c, err := client.Dial(context.Background(), cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck // test
	if err := c.Send(&proto.Acquire{GPU: testGPU}); err != nil {
		t.Fatal(err)
	}
	me := "pid-" + strconv.Itoa(os.Getpid())
	waitStatusWhere(t, cfg, "this process's group waiting", func(g nodestatus.GroupGPUStatus) bool { return g.Group == me && g.Waiting })
	killed := time.Now()
	if err := holder.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := c.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitGrant(); err != nil {
		t.Fatalf("no grant after the holder died: %v", err)
	}
	if d := time.Since(killed); d > time.Second {
		t.Fatalf("grant came %v after the holder died", d)
	}
}

// A holder that never hands over is revoked at the end of its grant and loses
// it after the grace time; the waiting process is not stalled.
func TestSlowHolderRevokedThenExpired(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "w", group.Change{File: "slice", Value: "5ms"})
	startDaemon(t, cfg)
	slow, err := client.Dial(context.Background(), cfg.Socket) // its own pid group, default 5ms slice
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close() //nolint:errcheck // test
	g, err := slow.Acquire(testGPU)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waiter := startChild(t, cfg, "cycle", "w", "GS_N=1")
	if err := slow.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var reasons []uint32
	for len(reasons) < 2 {
		m, err := slow.Next()
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := m.(*proto.Revoke); ok && r.Seq == g.Seq {
			reasons = append(reasons, r.Reason)
		}
	}
	if !slices.Equal(reasons, []uint32{proto.RevokeSliceEnd, proto.RevokeExpired}) {
		t.Fatalf("revoke reasons %v", reasons)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("expired after %v, before slice + grace", d)
	}
	lines := waiter.all(t, 5*time.Second)
	if len(parseGrants(t, lines)) != 1 {
		t.Fatalf("waiter: %q", lines)
	}
}

// sliceOf parses the slice of a "grant" line.
func sliceOf(t *testing.T, line string) time.Duration {
	t.Helper()
	iv := parseGrants(t, []string{line})
	if len(iv) != 1 {
		t.Fatalf("bad grant line %q", line)
	}
	return iv[0].slice
}

// Settings written to the group tree apply to a running process; an invalid
// hand-written value changes nothing and is written back.
func TestSettingsApplyLive(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "live", group.Change{File: "slice", Value: "3ms"})
	startDaemon(t, cfg)
	p := startChild(t, cfg, "cycle", "live", "GS_N=100000")
	p.expect(t, "grant live", 5*time.Second)
	setGroup(t, cfg, "live", group.Change{File: "slice", Value: "7ms"})
	deadline := time.Now().Add(5 * time.Second)
	for {
		l := p.expect(t, "grant live", 5*time.Second)
		if sliceOf(t, l) > 5*time.Millisecond { // 7ms less debt; 3ms before
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("new slice not applied: %q", l)
		}
	}
	file := filepath.Join(group.NewTree(cfg.RunDir).Path("live"), "slice")
	if err := os.WriteFile(file, []byte("soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(file)
		if err == nil && string(b) == "7ms\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("invalid value not restored: %q %v", b, err)
		}
	}
	p.expect(t, "grant live", 5*time.Second)
	st := waitStatusSince(t, cfg, time.Now()) // one written after the restore, not an older one
	for _, g := range st.GPUs {
		for _, e := range g.Groups {
			if e.Group == "live" && e.SliceNs != int64(7*time.Millisecond) {
				t.Fatalf("slice changed by an invalid value: %v", time.Duration(e.SliceNs))
			}
		}
	}
}

// A group whose slice file is invalid when the daemon starts keeps its
// valid files: only the invalid one is reset to its default.
func TestSettingsInvalidAtStartKeepValidFiles(t *testing.T) {
	cfg := testCfg(t)
	tree := group.NewTree(cfg.RunDir)
	setGroup(t, cfg, "half", group.Change{File: group.FileSlice, Value: "7ms"}, group.Change{File: group.FilePriority, Value: "online"})
	if err := os.WriteFile(filepath.Join(tree.Path("half"), group.FileSlice), []byte("soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := tree.ReadFile("half", group.FilePriority)
	if err != nil {
		t.Fatal(err)
	}
	startDaemon(t, cfg)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		slice, err := tree.ReadFile("half", group.FileSlice)
		if err == nil && slice == "default" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("invalid slice not reset to its default: %q %v", slice, err)
		}
	}
	if prio, err := tree.ReadFile("half", group.FilePriority); err != nil || prio != want {
		t.Fatalf("the valid priority file was overwritten: %q %v", prio, err)
	}
	if st, err := tree.Read("half"); err != nil || st.Priority != policy.High {
		t.Fatalf("settings after the write-back: %+v %v", st, err)
	}
}

// Concurrent starters end with exactly one daemon.
func TestConcurrentStartOneDaemon(t *testing.T) {
	cfg := testCfg(t)
	stopStartedDaemon(t, cfg)
	var ps []*childProc
	for range 4 {
		ps = append(ps, startChild(t, cfg, "ensure", ""))
	}
	for _, p := range ps {
		p.expect(t, "up", 15*time.Second)
	}
	// Exactly one process holds the lock: a second Run here is refused.
	err := timeslice.Run(context.Background(), cfg)
	if !errors.Is(err, timeslice.ErrRunning) {
		t.Fatalf("second daemon: %v, want ErrRunning", err)
	}
	// Daemons that lost the race exit at once: wait until only the winner
	// runs before it is stopped (or one of them would take over).
	st := waitStatus(t, cfg)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if d := daemonsOn(t, cfg.Socket); len(d) == 1 && d[0] == st.PID {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("daemons on the socket: %v, want only %d", d, st.PID)
		}
		st = waitStatus(t, cfg)
	}
	if st.PID <= 0 {
		t.Fatalf("status pid %d", st.PID)
	}
	if err := syscall.Kill(st.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); client.Reachable(context.Background(), cfg.Socket); {
		if time.Now().After(deadline) {
			t.Fatal("daemon still up after SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitStatus(t *testing.T, cfg timeslice.Config) *nodestatus.Status {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := nodestatus.Read(cfg.RunDir)
		if err == nil {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
}

// waitStatusSince waits for a status the daemon took at or after since (it
// publishes every Config.StatusEvery: the file may predate a change).
func waitStatusSince(t *testing.T, cfg timeslice.Config, since time.Time) *nodestatus.Status {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := nodestatus.Read(cfg.RunDir)
		if err == nil && !st.Time.Before(since) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("no status since %v: %v", since, err)
		}
	}
}

// Garbage on the socket gets an error frame and the connection is closed;
// other clients are unaffected.
func TestProtocolErrors(t *testing.T) {
	cfg := testCfg(t)
	startDaemon(t, cfg)
	for _, tc := range []struct {
		name string
		send func(c *client.Client) error
		want string
	}{
		{"no hello", func(c *client.Client) error { return c.Send(&proto.Acquire{GPU: testGPU}) }, "code 2"},
		{"garbage", func(c *client.Client) error {
			_, err := c.Conn().Write(make([]byte, proto.FrameSize))
			return err
		}, "magic"},
		{"other version", func(c *client.Client) error {
			var b [proto.FrameSize]byte
			if err := proto.Encode(b[:], &proto.Hello{}); err != nil {
				return err
			}
			b[4] = 1 // version 1 was a byte stream
			_, err := c.Conn().Write(b[:])
			return err
		}, "code 1"},
		{"short record", func(c *client.Client) error {
			_, err := c.Conn().Write(make([]byte, proto.FrameSize/2))
			return err
		}, "record of 64 bytes"},
		{"two frames in one record", func(c *client.Client) error {
			b := make([]byte, 2*proto.FrameSize)
			if err := proto.Encode(b, &proto.Hello{}); err != nil {
				return err
			}
			copy(b[proto.FrameSize:], b[:proto.FrameSize])
			_, err := c.Conn().Write(b)
			return err
		}, "longer than one frame"},
	} {
		c := rawDial(t, cfg.Socket)
		if err := tc.send(c); err != nil {
			t.Fatal(err)
		}
		_, err := c.Next()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if _, err := c.Next(); err == nil {
			t.Errorf("%s: connection still open", tc.name)
		}
	}
	good, err := client.Dial(context.Background(), cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.Acquire(testGPU); err != nil {
		t.Fatal(err)
	}
}

func rawDial(t *testing.T, socket string) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), socket) // then misbehave on a fresh one
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := dialNoHello(socket)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return raw
}

func dialNoHello(socket string) (*client.Client, error) {
	nc, err := net.Dial(proto.Network, socket)
	if err != nil {
		return nil, err
	}
	return client.New(nc.(*net.UnixConn)), nil
}

// stopPID stops pid (SIGTERM) and waits until it has exited, so that
// nothing of it writes into the test's directories any more.
func stopPID(t *testing.T, pid int) {
	t.Helper()
	if err := client.StopPID(pid, unix.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// stopStartedDaemon stops, when the test ends, a daemon that EnsureRunning
// started in cfg's run directory (even if the test failed before it could).
func stopStartedDaemon(t *testing.T, cfg timeslice.Config) {
	t.Cleanup(func() {
		if st, err := nodestatus.Read(cfg.RunDir); err == nil && st.PID > 0 && st.PID != os.Getpid() {
			stopPID(t, st.PID)
		}
	})
}

// An online group with banked time makes an offline holder hand over at once
// (revoke with reason preempt), and gets a preempt grant with its bank.
func TestOnlinePreemptsOffline(t *testing.T) {
	cfg := testCfg(t)
	cfg.Policy.DefaultSlice = time.Second // the offline holder would hold for a second
	setGroup(t, cfg, "on", group.Change{File: "priority", Value: "high"})
	startDaemon(t, cfg)
	on := startChild(t, cfg, "online", "on")
	on.expect(t, "banked", 5*time.Second)
	off, err := client.Dial(context.Background(), cfg.Socket) // its own pid group, low priority
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close() //nolint:errcheck // test
	g, err := off.Acquire(testGPU)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(on.stdin, "go\n"); err != nil { // the online group asks now
		t.Fatal(err)
	}
	start := time.Now()
	if err := off.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	m, err := off.Next()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := m.(*proto.Revoke); !ok || r.Seq != g.Seq || r.Reason != proto.RevokePreempt {
		t.Fatalf("got %+v, want a preempt revoke of grant %d", m, g.Seq)
	}
	if err := off.Release(testGPU, g.Seq, true); err != nil {
		t.Fatal(err)
	}
	if l := on.expect(t, "grant", 3*time.Second); l != "grant true true" {
		t.Fatalf("online grant %q, want a preempt grant longer than its slice", l)
	}
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Fatalf("preemption took %v", d)
	}
}

// waitStatusWhere waits until status.json shows a group entry for which ok holds.
func waitStatusWhere(t *testing.T, cfg timeslice.Config, what string, ok func(nodestatus.GroupGPUStatus) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, err := nodestatus.Read(cfg.RunDir); err == nil {
			for _, g := range st.GPUs {
				for _, e := range g.Groups {
					if ok(e) {
						return
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed %s", what)
		}
	}
}

// daemonsOn returns the pids of processes started as daemons on socket
// ("<exe> node ... --socket <socket> ...").
func daemonsOn(t *testing.T, socket string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // gone
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && args[1] == "node" && slices.Contains(args, socket) {
			out = append(out, pid)
		}
	}
	return out
}
