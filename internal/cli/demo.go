package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/demo"
	"github.com/gpuslice/gpuslice/internal/units"
)

func demoCommand(env *Env) *cobra.Command {
	cfg := demo.Config{BinDir: env.BinDir, Out: env.Stdout}
	cmd := &cobra.Command{
		Use:   "demo [flags]",
		Short: "four training tasks sharing one GPU, without and with gpuslice limits, then with elastic memory",
		Args:  noArgs(env),
	}
	fs := cmd.Flags()
	driver := driverFlag(env, fs, "GPU driver: auto, real or sim (env GPUSLICE_DRIVER)")
	simMemory := fs.String("sim-memory", "23GiB", "memory of the simulated GPU (when no driver is present)")
	fs.IntVar(&cfg.Tasks, "tasks", 4, "number of training tasks")
	fs.IntVar(&cfg.Steps, "steps", 40, "training steps per task (with --duration 0)")
	fs.DurationVar(&cfg.Duration, "duration", 3*time.Second, "train each task for this long (0: --steps steps)")
	fs.IntVar(&cfg.Kernels, "kernels", 4, "kernels per step")
	fs.IntVar(&cfg.KernelUS, "kernel-us", 2500, "GPU time of one kernel in microseconds")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return runDemo(cmd.Context(), env, cfg, *driver, *simMemory)
	}
	return cmd
}

func runDemo(ctx context.Context, env *Env, cfg demo.Config, driver, simMemory string) error {
	if cfg.Tasks < 1 || cfg.Steps < 1 || cfg.Kernels < 1 || cfg.KernelUS < 0 {
		return usagef("demo: --tasks, --steps and --kernels must be at least 1, --kernel-us at least 0")
	}
	mem, err := units.ParseSize(simMemory)
	if err != nil || mem == 0 {
		return usagef("--sim-memory: %v", err)
	}
	work, err := os.MkdirTemp("", "gpuslice-demo-")
	if err != nil {
		return fmt.Errorf("demo work directory: %w", err)
	}
	defer func() {
		if err := os.RemoveAll(work); err != nil {
			klog.FromContext(ctx).Error(err, "remove demo work directory", "dir", work)
		}
	}()
	// The simulator reads these at load time; a real driver ignores them.
	for k, v := range map[string]string{
		"GPUSLICE_SIM_GPUS": "1", "GPUSLICE_SIM_MEMORY": strconv.FormatUint(mem, 10),
		"GPUSLICE_SIM_STATE": filepath.Join(work, "sim.state"), "GPUSLICE_RUN_DIR": filepath.Join(work, "run"),
	} {
		if err := os.Setenv(k, v); err != nil {
			return fmt.Errorf("set %s: %w", k, err)
		}
	}
	drv, devs, err := inspectGPUs(env, driver)
	if err != nil {
		return err
	}
	if len(devs) == 0 {
		return fmt.Errorf("demo: no GPU found")
	}
	cfg.GPUName, cfg.GPUMemory, cfg.Simulated = devs[0].Name, devs[0].MemoryTotal, drv.Simulated
	cfg.Env = os.Environ()
	if drv.Simulated {
		cfg.Env = append(cfg.Env, "LD_LIBRARY_PATH="+drv.LibDir+":"+os.Getenv("LD_LIBRARY_PATH"), "GPUSLICE_DRIVER=sim")
	}
	_, err = demo.Run(ctx, &cfg)
	return err
}
