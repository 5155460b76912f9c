// Command gpuslice-scheduler is kube-scheduler with the gpuslice plugin
// compiled in. It takes every kube-scheduler flag; enable the plugin with a
// KubeSchedulerConfiguration profile (see docs/scheduling.md). With leader
// election on, the resize controller runs in the leader only.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpuslice/gpuslice/internal/schedapp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := schedapp.Main(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
