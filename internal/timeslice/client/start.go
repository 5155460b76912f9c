package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/proto"
)

// Reachable reports whether a daemon answers on socket.
func Reachable(ctx context.Context, socket string) bool {
	var d net.Dialer
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, proto.Network, socket)
	if err != nil {
		return false
	}
	return c.Close() == nil
}

// StartOptions say how to start a daemon.
type StartOptions struct {
	// Exe is the gpuslice binary (default: this executable).
	Exe string
	// Args are passed after "node" (e.g. --socket).
	Args []string
	// Env is the daemon's environment (default: this process's).
	Env []string
	// LogFile receives the daemon's output (default: <dir of socket>/node.log).
	LogFile string
	// Output, if set, receives the daemon's output instead of LogFile (a
	// supervising agent passes its own stderr).
	Output *os.File
	// Wait bounds how long to wait for the socket (default 10 s).
	Wait time.Duration
}

// EnsureRunning starts `gpuslice node --if-not-running` in the background
// unless a daemon already answers on socket, then waits until one does. Any
// number of processes may call it at once: the daemon's lock on the run directory leaves one
// daemon running and the others exit.
func EnsureRunning(ctx context.Context, socket string, o StartOptions) error {
	if Reachable(ctx, socket) {
		return nil
	}
	log := klog.FromContext(ctx)
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("start node daemon: %w", err)
		}
		o.Exe = exe
	}
	if o.LogFile == "" {
		o.LogFile = filepath.Join(filepath.Dir(socket), "node.log")
	}
	if o.Wait == 0 {
		o.Wait = 10 * time.Second
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return fmt.Errorf("start node daemon: %w", err)
	}
	out, err := o.output()
	if err != nil {
		return fmt.Errorf("start node daemon: %w", err)
	}
	args := append([]string{"node", "--if-not-running", "--socket", socket}, o.Args...)
	cmd := exec.Command(o.Exe, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = o.Env, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives the caller's terminal
	serr := cmd.Start()
	if cerr := o.closeOutput(out); serr == nil && cerr != nil {
		log.V(2).Info("close daemon log", "err", cerr)
	}
	if serr != nil {
		return fmt.Errorf("start node daemon %s: %w", o.Exe, serr)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reap it if it loses the race and exits
	log.V(1).Info("started node daemon", "pid", cmd.Process.Pid, "socket", socket, "log", o.LogFile)
	return waitReachable(ctx, socket, o.Wait, exited)
}

// output is where the daemon writes: Output, else LogFile opened for append.
func (o StartOptions) output() (*os.File, error) {
	if o.Output != nil {
		return o.Output, nil
	}
	return os.OpenFile(o.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
}

// closeOutput closes what output opened (Output belongs to the caller).
func (o StartOptions) closeOutput(f *os.File) error {
	if o.Output != nil {
		return nil
	}
	return f.Close()
}

// waitReachable looks every millisecond for the first 50 ms (a daemon comes
// up in 10-20 ms: a coarser poll would add up to its period to every start),
// then every 10 ms.
func waitReachable(ctx context.Context, socket string, wait time.Duration, exited <-chan error) error {
	start := time.Now()
	deadline := start.Add(wait)
	var exitErr error
	for time.Now().Before(deadline) {
		if Reachable(ctx, socket) {
			return nil
		}
		poll := time.Millisecond
		if time.Since(start) > 50*time.Millisecond {
			poll = 10 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-exited:
			// Losing the lock race exits 0; another daemon is coming up.
			exitErr = err
		case <-time.After(poll):
		}
	}
	return errors.Join(fmt.Errorf("node daemon did not come up on %s within %v", socket, wait), exitErr)
}
