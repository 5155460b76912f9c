// Command gpuslice-publisher publishes this node's row of the gpuslice
// resource table (GPUNode) from NVML, the real driver's or the simulated
// GPU's. The node agent runs the same library (internal/gpunoderow) in-process.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpunoderow"
	"github.com/gpuslice/gpuslice/internal/logflags"
	"github.com/gpuslice/gpuslice/internal/version"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

func main() {
	host, _ := os.Hostname()
	var c gpunoderow.Config
	var driver, state string
	fs := flag.NewFlagSet("gpuslice-publisher", flag.ExitOnError)
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig path (default: in-cluster or $KUBECONFIG)")
	fs.StringVar(&c.Node, "node", host, "node name (the GPUNode's name)")
	fs.DurationVar(&c.Period, "period", 10*time.Second, "publishing period")
	fs.StringVar(&driver, "driver", "auto", "GPU driver: auto, real or sim")
	fs.StringVar(&c.SimDir, "sim-dir", "bin/sim", "directory of the simulated libnvidia-ml.so.1")
	fs.StringVar(&state, "state", string(v1alpha2.NodeWorking), "node state to publish: Working, Draining or NotReady")
	fs.BoolVar(&c.Once, "once", false, "publish once and exit")
	showVersion := fs.Bool("version", false, "print the version and exit")
	logCfg := logflags.AddGoFlags(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError
	if *showVersion {
		fmt.Println(version.String("gpuslice-publisher"))
		return
	}
	mode, err := gpu.ParseMode(driver)
	if err == nil {
		err = logflags.Apply(logCfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuslice-publisher:", err)
		os.Exit(2)
	}
	c.Driver, c.State = mode, v1alpha2.NodeState(state)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	klog.Background().Info("starting gpuslice-publisher", "version", version.Get(), "node", c.Node)
	if err := gpunoderow.Run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "gpuslice-publisher:", err)
		os.Exit(1)
	}
}
