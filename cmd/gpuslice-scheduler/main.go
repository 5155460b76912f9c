// Command gpuslice-scheduler is kube-scheduler with the gpuslice plugin
// compiled in. It takes every kube-scheduler flag; enable the plugin with a
// KubeSchedulerConfiguration profile (see docs/scheduling.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpuslice/gpuslice/internal/sched"
	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := app.NewSchedulerCommand(app.WithPlugin(sched.Name, sched.New))
	cmd.SetContext(ctx)
	os.Exit(cli.Run(cmd))
}
