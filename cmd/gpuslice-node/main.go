// Command gpuslice-node is the gpuslice node agent: time-slice daemon, kubelet
// device plugin, resource-table publisher and GPU hot-plug reconciler
// (internal/agent). Its settings come from flags, the environment and a
// versioned configuration file, in that order (internal/nodeconfig).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/logflags"
	"github.com/gpuslice/gpuslice/internal/nodeconfig"
	"github.com/gpuslice/gpuslice/internal/version"
)

func main() {
	env := environ()
	o, err := nodeconfig.Load(os.Args[1:], func(k string) (string, bool) { v, ok := env[k]; return v, ok }, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return
	case err != nil:
		fmt.Fprintf(os.Stderr, "gpuslice-node: %v\n", err)
		os.Exit(2)
	case o.ShowVersion:
		fmt.Println(version.String("gpuslice-node"))
		return
	}
	if err := logflags.Apply(&o.Logging); err != nil {
		fmt.Fprintf(os.Stderr, "gpuslice-node: %v\n", err)
		os.Exit(2)
	}
	os.Exit(run(o, env))
}

// environ is the process environment as a map.
func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// run runs the agent until SIGTERM or SIGINT and returns the exit code.
func run(o nodeconfig.Options, env map[string]string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	cfg := o.Agent
	klog.Background().Info("starting gpuslice-node", "version", version.Get(), "node", cfg.NodeName, "driver", cfg.Driver, "config", o.ConfigFile)
	var err error
	if o.InstallLibrary != "" {
		err = agent.RunInstalled(ctx, cfg, env, o.InstallLibrary)
	} else {
		err = agent.Run(ctx, cfg, env)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "gpuslice-node")
	}
	klog.Flush()
	if err != nil {
		return 1
	}
	return 0
}
