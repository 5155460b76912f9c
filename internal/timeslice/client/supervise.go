package client

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"

	"k8s.io/klog/v2"
)

// superviseRetry is how long Supervise waits after a round that did not end
// with a daemon connection (refused, or none could be started).
const superviseRetry = 100 * time.Millisecond

// Supervise keeps a time-slice daemon running on socket while ctx lasts: it holds a
// connection to the daemon (one frame each way, then a blocking read), and
// when the daemon goes away (killed, crashed) the read returns at once and it
// starts another (EnsureRunning; concurrent supervisors end with one daemon).
// Every `gpuslice run` supervises for as long as its command runs, so a killed
// daemon is back within the time a daemon takes to start, and the libraries'
// gates reconnect on their next retry. It stops when the run directory is
// removed (the daemon stops then too). Logs at V(2) only: a run's stderr is
// the application's.
func Supervise(ctx context.Context, socket, runDir string, o StartOptions) {
	log := klog.FromContext(ctx).V(2)
	for ctx.Err() == nil {
		c, err := Dial(ctx, socket)
		if err == nil {
			stop := context.AfterFunc(ctx, func() { _ = c.Close() }) //nolint:errcheck // wakes the read below
			_, err = c.Next()                                        // returns when the daemon goes away
			stop()
			if cerr := c.Close(); cerr != nil && ctx.Err() == nil {
				log.Info("close supervision connection", "err", cerr)
			}
			if ctx.Err() != nil {
				return
			}
			log.Info("node daemon gone; starting another", "socket", socket, "err", err)
		}
		if ctx.Err() != nil { // the dial was cut short: the run is over
			return
		}
		if _, serr := os.Stat(runDir); errors.Is(serr, fs.ErrNotExist) {
			log.Info("run directory removed; not restarting the node daemon", "runDir", runDir)
			return
		}
		if err := EnsureRunning(ctx, socket, o); err != nil {
			log.Info("start node daemon", "err", err)
		}
		if err != nil { // the dial failed: do not spin on a daemon that refuses
			select {
			case <-ctx.Done():
			case <-time.After(superviseRetry):
			}
		}
	}
}
