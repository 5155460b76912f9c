package cli

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/ctxprobe"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/logflags"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/units"
)

// sizeFlag is a byte size flag (a Kubernetes quantity or 6GiB).
type sizeFlag struct{ v *uint64 }

func (f sizeFlag) String() string {
	if f.v == nil {
		return ""
	}
	return units.FormatSize(*f.v)
}

// Type names the value in --help.
func (f sizeFlag) Type() string { return "quantity" }

func (f sizeFlag) Set(s string) error {
	n, err := units.ParseSize(s)
	if err != nil {
		return err
	}
	*f.v = n
	return nil
}

// deviceMemory reads device memory through NVML, opened at the first
// elastic memory request (a daemon that only shares time never opens it).
type deviceMemory struct {
	mode   gpu.Mode
	simDir string
	mu     sync.Mutex
	drv    *gpu.Driver
	index  map[string]int
}

func (d *deviceMemory) read(uuid string) (total, used uint64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.drv == nil {
		drv, err := gpu.OpenDriver(d.mode, d.simDir)
		if err != nil {
			return 0, 0, err
		}
		devs, err := gpu.Devices(drv.NVML)
		if err != nil {
			return 0, 0, errors.Join(fmt.Errorf("list GPUs: %w", err), drv.NVML.Shutdown())
		}
		d.drv, d.index = drv, map[string]int{}
		for _, dv := range devs {
			d.index[strings.ToLower(dv.UUID)] = dv.Index
		}
	}
	i, ok := d.index[strings.ToLower(uuid)]
	if !ok {
		return 0, 0, fmt.Errorf("no GPU %s", uuid)
	}
	m, err := d.drv.NVML.Memory(i)
	if err != nil {
		return 0, 0, fmt.Errorf("memory of GPU %s: %w", uuid, err)
	}
	return m.Total, m.Used, nil
}

func (d *deviceMemory) close(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.drv != nil {
		if err := d.drv.NVML.Shutdown(); err != nil {
			klog.FromContext(ctx).Error(err, "close NVML")
		}
	}
}

func nodeCommand(env *Env) *cobra.Command {
	cfg := timeslice.DefaultConfig(env.Getenv)
	var o nodeOptions
	cmd := &cobra.Command{
		Use:   "node [flags]",
		Short: "run the node daemon that shares GPU time (gpuslice run starts it)",
		Args:  noArgs(env),
		RunE:  func(cmd *cobra.Command, _ []string) error { return runNode(cmd.Context(), env, cfg, &o) },
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "unix socket path (env "+nodestatus.EnvSocket+")")
	fs.StringVar(&cfg.RunDir, "run-dir", cfg.RunDir, "run directory holding groups/ and status.json (env GPUSLICE_RUN_DIR)")
	fs.DurationVar(&cfg.Policy.Period, "period", cfg.Policy.Period, "scheduling period that --share values are a fraction of")
	fs.DurationVar(&cfg.Policy.DefaultSlice, "default-slice", cfg.Policy.DefaultSlice, "slice of a low-priority group that sets none (high: 2x)")
	fs.DurationVar(&cfg.Policy.BankMaxAge, "bank-age", cfg.Policy.BankMaxAge, "how long banked (unused) slice time stays usable")
	fs.IntVar(&cfg.Policy.BankMaxSlices, "bank-slices", cfg.Policy.BankMaxSlices, "burst buffer size, in slices of the group")
	fs.DurationVar(&cfg.Policy.Grace, "grace", cfg.Policy.Grace, "time a holder gets to finish outstanding work after its grant ends")
	fs.DurationVar(&cfg.Policy.Renew, "renew", cfg.Policy.Renew, "renew a lone holder's grant this long before its end (at most half its slice; 0: hand over every slice)")
	fs.DurationVar(&cfg.IdleExit, "idle-exit", 0, "stop after no client has been connected for this long (0: never; gpuslice run starts daemons with 60s)")
	fs.BoolVar(&o.noBurst, "no-burst", false, "disable burst buffers (and the online groups' early turns they allow)")
	fs.BoolVar(&o.ifNot, "if-not-running", false, "exit quietly (status 0) if a daemon already runs")
	fs.Var(sizeFlag{&cfg.Elastic.Reserve}, "memory-reserve", "elastic memory: device memory never lent (e.g. 256MiB)")
	fs.DurationVar(&cfg.Elastic.ReclaimWait, "reclaim-wait", cfg.Elastic.ReclaimWait, "elastic memory: how long an allocation within a guarantee waits for borrowers to give memory back")
	fs.StringVar(&o.driver, "driver", env.Getenv("GPUSLICE_DRIVER"), "GPU driver: its GPUs are the ones scheduled, and elastic memory's device readings: auto, real or sim")
	fs.StringVar(&o.simDir, "sim-dir", filepath.Join(env.BinDir, "sim"), "directory of the simulated driver libraries (--driver sim or auto)")
	fs.StringVar(&o.probe, "context-probe", filepath.Join(env.BinDir, ctxprobe.Binary), "the node's context probe: what a context takes on each kind of device, measured at start and when a GPU is added (empty: none; groups reserve first contexts at what they measured, else 512 MiB)")
	fs.StringVar(&cfg.ProcRoot, "proc-root", cfg.ProcRoot, "where the host's /proc is mounted (members are identified there)")
	o.logs = logflags.AddFlags(fs)
	return cmd
}

// nodeOptions are node's flags that are not part of timeslice.Config.
type nodeOptions struct {
	noBurst, ifNot bool
	driver, simDir string
	probe          string
	logs           *logflags.Config
}

func runNode(ctx context.Context, env *Env, cfg timeslice.Config, o *nodeOptions) error {
	cfg.Policy.Burst = !o.noBurst
	mode, err := gpu.ParseMode(o.driver)
	if err != nil {
		return usagef("node: --driver: %w", err)
	}
	cfg.ListGPUs = timeslice.DriverGPUs(mode, o.simDir)
	if o.probe != "" {
		cfg.ContextProbe = ctxprobe.Runner(o.probe, mode, o.simDir)
	}
	if err := cfg.Validate(); err != nil {
		return usagef("node: %w", err)
	}
	if err := logflags.Validate(o.logs); err != nil {
		return usagef("node: %w", err)
	}
	if err := logflags.Apply(o.logs); err != nil {
		return err
	}
	dev := &deviceMemory{mode: mode, simDir: o.simDir}
	defer dev.close(ctx)
	cfg.DeviceMemory = dev.read
	ctx = klog.NewContext(ctx, klog.NewKlogr())
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = timeslice.Run(ctx, cfg)
	if errors.Is(err, timeslice.ErrRunning) && o.ifNot {
		return nil
	}
	return err
}
