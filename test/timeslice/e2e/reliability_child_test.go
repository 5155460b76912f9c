//go:build timeslicee2e

package timeslicee2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/proto"

	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// floodChild opens GS_N connections that each say hello, reads every answer,
// prints "flood welcomed W refused R closed C other O" (closed: the daemon
// closed the connection before its refusal could be read), then holds them
// until killed.
func floodChild(socket string) error {
	var n int
	if _, err := fmt.Sscan(os.Getenv("GS_N"), &n); err != nil {
		return fmt.Errorf("GS_N: %w", err)
	}
	conns := make([]*client.Client, 0, n)
	for range n {
		nc, err := dialRetry(socket)
		if err != nil {
			return err
		}
		c := client.New(nc)
		if err := c.Send(&proto.Hello{}); err != nil && !errors.Is(err, syscall.EPIPE) {
			return err
		}
		conns = append(conns, c)
	}
	var welcomed, refused, closed, other int
	firstOther := ""
	for _, c := range conns {
		if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
			return err
		}
		m, err := c.Next()
		switch {
		case err == nil && m.Type() == proto.TypeWelcome:
			welcomed++
		case client.IsBusy(err):
			refused++
		case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
			closed++
		default:
			if other++; firstOther == "" {
				firstOther = fmt.Sprintf(" (first: %v, message %v)", err, m)
			}
		}
	}
	fmt.Printf("flood welcomed %d refused %d closed %d other %d%s\n", welcomed, refused, closed, other, firstOther)
	defer runtime.KeepAlive(conns) // held open (unreferenced, the collector would close them)
	if os.Getenv("GS_CHURN") == "" {
		time.Sleep(time.Hour)
		return nil
	}
	// A hostile client that keeps trying: connect, hello, refused, again.
	counts := map[string]int{}
	for start := time.Now(); ; {
		c, err := client.Dial(context.Background(), socket)
		switch {
		case err == nil:
			counts["welcomed"]++
			err = c.Close()
		case client.IsBusy(err):
			counts["refused"]++
			err = nil
		default:
			counts[err.Error()]++
			err = nil
		}
		if err != nil {
			return err
		}
		if os.Getenv("GS_CHURN_REPORT") != "" && time.Since(start) > 2*time.Second {
			fmt.Println("churn", counts)
			start = time.Now()
		}
	}
}

// dialRetry connects, waiting while the listen backlog is full (EAGAIN).
func dialRetry(socket string) (*net.UnixConn, error) {
	addr := &net.UnixAddr{Name: socket, Net: proto.Network}
	for deadline := time.Now().Add(30 * time.Second); ; {
		nc, err := net.DialUnix(proto.Network, nil, addr)
		if err == nil {
			return nc, nil
		}
		if !errors.Is(err, syscall.EAGAIN) || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(time.Millisecond) // the daemon drains its backlog
	}
}

// unknownGPUsChild asks for GS_N made-up GPUs on one connection and prints
// how the daemon answered the first: "unknown-gpu refused <code>" or
// "unknown-gpu granted".
func unknownGPUsChild(socket string) error {
	c, err := client.Dial(context.Background(), socket)
	if err != nil {
		return err
	}
	defer c.Close() //nolint:errcheck // test child
	for i := range 64 {
		if err := c.Send(&proto.Acquire{GPU: proto.UUID{0xee, byte(i), 0x5a}}); err != nil {
			break // refused and closed
		}
	}
	m, err := c.Next()
	var r *client.RefusedError
	switch {
	case errors.As(err, &r):
		fmt.Println("unknown-gpu refused", r.Code)
	case err == nil && m.Type() == proto.TypeGrant:
		fmt.Println("unknown-gpu granted")
	case errors.Is(err, io.EOF):
		fmt.Println("unknown-gpu closed")
	default:
		return fmt.Errorf("unknown GPUs: %v %w", m, err)
	}
	return nil
}

var (
	sharedExeOnce sync.Once
	sharedExe     string
	sharedExeErr  error
)

// sharedTestBinary is a copy of the test binary that any user may run (the
// build directory is private to root).
func sharedTestBinary(t testing.TB) string {
	t.Helper()
	sharedExeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gs-node-test-bin-")
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		var b []byte
		if err == nil {
			b, err = os.ReadFile(os.Args[0])
		}
		if err == nil {
			sharedExe = filepath.Join(dir, "node.test")
			err = os.WriteFile(sharedExe, b, 0o755)
		}
		sharedExeErr = err
	})
	if sharedExeErr != nil {
		t.Fatal(sharedExeErr)
	}
	return sharedExe
}

// openToAll lets other users reach cfg's socket (test directories are 0700).
func openToAll(t testing.TB, cfg timeslice.Config) {
	t.Helper()
	for _, d := range []string{cfg.RunDir, filepath.Dir(cfg.RunDir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// startChildAs is startChild as another user (root only).
func startChildAs(t testing.TB, cfg timeslice.Config, uid uint32, mode string, env ...string) *childProc {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs a client as another user")
	}
	cmd := exec.Command(sharedTestBinary(t), "-test.run=^$")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	return startChildCmd(t, cmd, cfg, mode, "", env...)
}

// threads returns this process's thread count.
func threads(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for line := range strings.SplitSeq(string(b), "\n") {
		if _, err := fmt.Sscanf(line, "Threads: %d", &n); err == nil {
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}
