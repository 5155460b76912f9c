// Command gpuslice is the gpuslice command line: run programs with GPU limits,
// the demo, and the node-side commands.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpuslice/gpuslice/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	env, err := cli.DefaultEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpuslice: %v\n", err)
		os.Exit(1)
	}
	code := cli.Main(ctx, os.Args[1:], env)
	stop()
	os.Exit(code)
}
