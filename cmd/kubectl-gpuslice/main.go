// Command kubectl-gpuslice is the `kubectl gpuslice` plugin: GPU usage per
// node and GPU (top) and GPU shares per pod (pods) from the GPUNode table and
// the pods' assignments (internal/kubectlplugin).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/gpuslice/gpuslice/internal/kubectlplugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := kubectlplugin.Main(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	os.Exit(code)
}
