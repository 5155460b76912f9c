package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os/signal"
	"strconv"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/node"
)

func nodeCommand() Command {
	return Command{Name: "node", Summary: "run the node daemon that shares GPU time (gpuslice run starts it)", Run: runNode}
}

func runNode(ctx context.Context, env *Env, args []string) error {
	cfg := node.DefaultConfig(env.Getenv)
	fs := newFlagSet(env, "node", "[flags]")
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "unix socket path (env "+node.EnvSocket+")")
	fs.StringVar(&cfg.RunDir, "run-dir", cfg.RunDir, "run directory holding groups/ and status.json (env GPUSLICE_RUN_DIR)")
	fs.DurationVar(&cfg.Policy.Period, "period", cfg.Policy.Period, "scheduling period that --share values are a fraction of")
	fs.DurationVar(&cfg.Policy.DefaultSlice, "default-slice", cfg.Policy.DefaultSlice, "slice of a low-priority group that sets none (high: 2x)")
	fs.DurationVar(&cfg.Policy.BankMaxAge, "bank-age", cfg.Policy.BankMaxAge, "how long banked (unused) slice time stays usable")
	fs.IntVar(&cfg.Policy.BankMaxSlices, "bank-slices", cfg.Policy.BankMaxSlices, "burst buffer size, in slices of the group")
	fs.DurationVar(&cfg.Policy.Grace, "grace", cfg.Policy.Grace, "time a holder gets to finish outstanding work after its grant ends")
	fs.DurationVar(&cfg.IdleExit, "idle-exit", 0, "stop after no client has been connected for this long (0: never; gpuslice run starts daemons with 60s)")
	noBurst := fs.Bool("no-burst", false, "disable burst buffers (and the online groups' early turns they allow)")
	ifNot := fs.Bool("if-not-running", false, "exit quietly (status 0) if a daemon already runs")
	verbosity := fs.Int("v", 0, "log verbosity")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("node: unexpected arguments %q", fs.Args())
	}
	cfg.Policy.Burst = !*noBurst
	if err := cfg.Validate(); err != nil {
		return usagef("node: %w", err)
	}
	if *verbosity > 0 {
		kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(kfs)
		if err := kfs.Set("v", strconv.Itoa(*verbosity)); err != nil {
			return fmt.Errorf("set log verbosity: %w", err)
		}
	}
	ctx = klog.NewContext(ctx, klog.NewKlogr())
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := node.Run(ctx, cfg)
	if errors.Is(err, node.ErrRunning) && *ifNot {
		return nil
	}
	return err
}
