package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// daemonStopWait bounds how long the agent waits for the daemon it
// supervised to exit at shutdown.
const daemonStopWait = 10 * time.Second

// superviseDaemon runs the time-slice daemon as a child process (`gpuslice node`)
// until ctx ends. A killed or crashed daemon is started again as soon as its
// supervision connection breaks (client.Supervise), with every group's settings
// read back from the run directory, while the device plugin, the publisher
// and the reconciler in this process keep running. At the end it stops the
// daemon, so that none outlives the agent that supervised it.
func superviseDaemon(ctx context.Context, cfg Config) error {
	o, err := daemonStart(cfg)
	if err != nil {
		return err
	}
	log := klog.FromContext(ctx)
	if err := client.EnsureRunning(ctx, cfg.Socket, o); err != nil && ctx.Err() == nil {
		log.Error(err, "start node daemon (retrying)")
	}
	client.Supervise(ctx, cfg.Socket, cfg.RunDir, o)
	return stopDaemon(log, cfg.RunDir)
}

// daemonStart says how the daemon is started: the agent's own GPU driver,
// simulator directory, run directory and /proc, output to the agent's stderr.
func daemonStart(cfg Config) (client.StartOptions, error) {
	exe := cfg.DaemonBinary
	if exe == "" {
		self, err := os.Executable()
		if err != nil {
			return client.StartOptions{}, fmt.Errorf("node daemon binary: %w", err)
		}
		exe = filepath.Join(filepath.Dir(self), "gpuslice")
	}
	if _, err := os.Stat(exe); err != nil {
		return client.StartOptions{}, fmt.Errorf("node daemon binary (--daemon-binary): %w", err)
	}
	args := []string{"--run-dir", cfg.RunDir, "--proc-root", cfg.ProcRoot, "--driver", string(cfg.Driver)}
	if cfg.SimDir != "" {
		args = append(args, "--sim-dir", cfg.SimDir)
	}
	return client.StartOptions{Exe: exe, Args: args, Env: os.Environ(), Output: os.Stderr}, nil
}

// stopDaemon stops the daemon serving runDir (SIGTERM) and waits for it to
// exit.
func stopDaemon(log klog.Logger, runDir string) error {
	st, err := nodestatus.Read(runDir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && st.PID <= 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop node daemon: %w", err)
	}
	if err := client.StopPID(st.PID, unix.SIGTERM, daemonStopWait); err != nil {
		return fmt.Errorf("stop node daemon: %w", err)
	}
	log.Info("node daemon stopped", "pid", st.PID)
	return nil
}
