package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpurequest"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/internal/runner"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
	"github.com/gpuslice/gpuslice/internal/units"
)

// runCommand is `gpuslice run`; do runs the parsed command (runRun, or a
// test's recorder).
func runCommand(env *Env, do func(ctx context.Context, env *Env, f *runFlags, command []string) error) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [--gpu N[,M...]] [--memory SIZE [--memory-max SIZE [--spill host]]] [--group NAME] -- CMD [ARGS...]",
		Short: "run a command with GPU limits: gpuslice run [--gpu N] --memory 6GiB -- CMD...",
		Long: "Run CMD and every process it starts as one group under GPU limits. Flags end at CMD (or at --):\n" +
			"CMD's own arguments are passed through untouched.",
		Annotations: map[string]string{stopsAtFirstArg: "true"},
		Args: usageArgs(env, func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("no command given (gpuslice run --memory 6GiB -- CMD...)")
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error { return do(cmd.Context(), env, &f, args) },
	}
	fs := cmd.Flags()
	fs.SetInterspersed(false)
	fs.StringVar(&f.gpus, "gpu", "", "GPU(s) the command may use: indices or UUIDs, comma-separated (default: all)")
	fs.StringVar(&f.memory, "memory", "", "GPU memory limit per GPU for the command and every process it starts, e.g. 6GiB")
	fs.StringVar(&f.memoryMax, "memory-max", "", "elastic memory: ceiling per GPU; --memory is then the guarantee and memory past it is borrowed from the node daemon while free, e.g. 20GiB")
	fs.StringVar(&f.spill, "spill", "", "elastic memory: host lets borrowed memory move to host memory when a guarantee needs it back (default none)")
	fs.StringVar(&f.group, "group", "", "group name; processes of one group share its limits (default: a new group per run)")
	fs.StringVar(&f.driver, "driver", env.Getenv("GPUSLICE_DRIVER"), "GPU driver: auto, real or sim (env GPUSLICE_DRIVER)")
	goFlags := flag.NewFlagSet("run", flag.ContinueOnError)
	f.slices.Register(goFlags)
	fs.AddGoFlagSet(goFlags)
	fs.BoolVar(&f.noDaemon, "no-daemon", false, "do not start the node daemon if none runs (kernels then run ungated)")
	return cmd
}

type runFlags struct {
	gpus, memory, group, driver string
	memoryMax, spill            string
	slices                      group.RunFlags
	noDaemon                    bool
}

func runRun(ctx context.Context, env *Env, f *runFlags, command []string) error {
	if _, err := f.slices.Changes(); err != nil { // a bad flag is a usage error, GPU or not
		return &UsageError{Err: err}
	}
	// In a group: its file named and the library preloaded (a variable left
	// set by hand alone is not a group).
	if file := env.Getenv("GPUSLICE_GROUP_FILE"); file != "" && strings.Contains(env.Getenv("LD_PRELOAD"), "libgpuslice") {
		return runInGroup(ctx, env, f, command, file)
	}
	setup, err := runRequest(f)
	if err != nil {
		return err
	}
	spec, err := buildRunSpec(env, f, setup.MemoryMax)
	if err != nil {
		return err
	}
	if setup.Elastic.Max > 0 {
		mode := "on"
		if setup.Elastic.Spill {
			mode = "spill"
		}
		spec.ExtraEnv = append(spec.ExtraEnv, "GPUSLICE_MEMORY_ELASTIC="+mode)
	}
	spec.Command = command
	daemonArgs := []string{"--idle-exit", "60s"}
	if f.driver != "" {
		daemonArgs = append(daemonArgs, "--driver", f.driver)
	}
	setup.Group, setup.Private, setup.NoDaemon = spec.Group, f.group == "", f.noDaemon
	setup.Start = client.StartOptions{Exe: filepath.Join(env.BinDir, "gpuslice"), Args: daemonArgs}
	extra, err := runner.PrepareRun(ctx, env.Getenv, setup)
	switch {
	case errors.Is(err, group.ErrInvalid):
		return &UsageError{Err: err}
	case errors.Is(err, runner.ErrNoDaemon):
		fmt.Fprintf(env.Stderr, "gpuslice: warning: %v; kernels run without time slices\n", err)
	case err != nil:
		return fmt.Errorf("prepare group %s: %w", spec.Group, err)
	}
	spec.ExtraEnv = append(spec.ExtraEnv, extra...)
	// While the command runs, this run keeps the time-slice daemon alive: killed,
	// it is started again at once (docs/timeslice.md, supervision).
	sctx, stopSupervising := context.WithCancel(ctx)
	supervised := make(chan struct{})
	go func() { defer close(supervised); runner.SuperviseRun(sctx, env.Getenv, setup) }()
	code, err := runner.Run(ctx, spec)
	stopSupervising()
	<-supervised
	if err != nil {
		return err
	}
	if code != 0 {
		return &ExitError{Code: code}
	}
	return nil
}

// runInGroup runs the command of a process that is in a group already (a run
// inside a run, a container's process) in that group, under its limits: they
// hold for the command that started it and every process it starts, and a
// group of its own would leave them. Flags that would make one are refused.
func runInGroup(ctx context.Context, env *Env, f *runFlags, command []string, file string) error {
	name := env.Getenv("GPUSLICE_GROUP")
	if name == "" {
		name = file
	}
	if f.memory != "" || f.memoryMax != "" || f.spill != "" || f.gpus != "" || (f.group != "" && f.group != name) ||
		f.slices != (group.RunFlags{}) {
		return usagef("already in group %s (GPUSLICE_GROUP_FILE): a run inside a group runs under that group's limits; "+
			"start it without --memory, --memory-max, --spill, --gpu, --group or time-slice flags, or from outside the group", name)
	}
	code, err := runner.Run(ctx, &runner.Spec{Command: command, InGroup: true, Env: os.Environ(),
		Stdin: env.Stdin, Stdout: env.Stdout, Stderr: env.Stderr})
	if err != nil {
		return err
	}
	if code != 0 {
		return &ExitError{Code: code}
	}
	return nil
}

// runRequest reads the run's group request from its flags (--memory,
// --memory-max, --spill and the time-slice flags) into a RunSetup, checked
// as gpurequest translates it; errors are usage errors naming the flags.
func runRequest(f *runFlags) (runner.RunSetup, error) {
	s := runner.RunSetup{Flags: f.slices}
	if f.memory != "" {
		v, err := units.ParseSize(f.memory)
		if err != nil {
			return s, usagef("--memory: %w", err)
		}
		if v == 0 {
			return s, usagef("--memory must be larger than 0")
		}
		s.MemoryMax = v
	}
	spill, err := group.ParseSpill(f.spill)
	if err != nil {
		return s, usagef("--spill: %w", err)
	}
	if f.memoryMax != "" {
		if s.Elastic.Max, err = units.ParseSize(f.memoryMax); err != nil {
			return s, usagef("--memory-max: %w", err)
		}
	}
	s.Elastic.Spill = spill
	_, err = s.Settings() // the rules are gpurequest's; the messages name the flags
	switch {
	case errors.Is(err, gpurequest.ErrSpillWithoutCeiling):
		return s, usagef("--spill needs --memory-max (spill moves borrowed memory)")
	case errors.Is(err, gpurequest.ErrCeilingWithoutGuarantee):
		return s, usagef("--memory-max needs --memory (the guarantee)")
	case errors.Is(err, gpurequest.ErrCeilingBelowGuarantee):
		return s, usagef("--memory-max %s is below --memory %s", f.memoryMax, f.memory)
	case err != nil:
		return s, &UsageError{Err: err}
	}
	return s, nil
}

// RunSettings are the settings `gpuslice run ARGS -- CMD` gives a new group:
// its flags read as a run reads them (runRequest), translated by gpurequest.
// Nothing runs and no GPU is looked at.
func RunSettings(args []string) (group.Settings, error) {
	env := &Env{Stdout: io.Discard, Stderr: io.Discard, Stdin: strings.NewReader(""), Getenv: func(string) string { return "" }}
	var st group.Settings
	var err error
	cmd := runCommand(env, func(_ context.Context, _ *Env, f *runFlags, _ []string) error {
		var s runner.RunSetup
		if s, err = runRequest(f); err == nil {
			st, err = s.Settings()
		}
		return nil
	})
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if xerr := cmd.Execute(); xerr != nil {
		return st, xerr
	}
	return st, err
}

// buildRunSpec validates the flags against the GPUs present (limit: --memory) and prepares the run.
func buildRunSpec(env *Env, f *runFlags, limit uint64) (*runner.Spec, error) {
	group := f.group
	if group == "" {
		group = "run-" + strconv.Itoa(os.Getpid())
	} else if err := paths.ValidateGroup(group); err != nil {
		return nil, usagef("--group: %w", err)
	}
	drv, devs, err := inspectGPUs(env, f.driver)
	if err != nil {
		return nil, err
	}
	chosen, err := selectGPUs(devs, f.gpus)
	if err != nil {
		return nil, usagef("--gpu: %w", err)
	}
	for _, d := range chosen {
		if limit > d.MemoryTotal {
			return nil, usagef("--memory %s is larger than GPU %d (%s, %s)", f.memory, d.Index, d.Name, units.FormatSize(d.MemoryTotal))
		}
	}
	spec := &runner.Spec{
		Group: group, KeepGroup: f.group != "", MemoryLimit: limit,
		RunDir:  paths.RunDir(env.Getenv),
		Library: filepath.Join(env.BinDir, "libgpuslice.so"),
		Env:     os.Environ(),
		Stdin:   env.Stdin, Stdout: env.Stdout, Stderr: env.Stderr,
	}
	if f.gpus != "" {
		for _, d := range chosen {
			spec.VisibleGPUs = append(spec.VisibleGPUs, d.UUID)
		}
	}
	if drv.Simulated {
		spec.SimLibDir = drv.LibDir
	}
	return spec, nil
}

// openDriver opens the real driver or the simulator, lists its GPUs, and says
// so when it is the simulator. On success the caller shuts NVML down.
func openDriver(env *Env, mode string) (*gpu.Driver, []gpu.Device, error) {
	m, err := gpu.ParseMode(mode)
	if err != nil {
		return nil, nil, usagef("--driver: %w", err)
	}
	drv, err := gpu.OpenDriver(m, filepath.Join(env.BinDir, "sim"))
	if err != nil {
		return nil, nil, err
	}
	devs, err := gpu.Devices(drv.NVML)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("list GPUs: %w", err), drv.NVML.Shutdown())
	}
	if drv.Simulated {
		desc := "no devices"
		if len(devs) > 0 {
			desc = fmt.Sprintf("%d x %s, %s", len(devs), devs[0].Name, units.FormatSize(devs[0].MemoryTotal))
		}
		fmt.Fprintf(env.Stderr, "gpuslice: no NVIDIA driver found; using the simulated GPU (%s) from %s\n", desc, drv.LibDir)
	}
	return drv, devs, nil
}

// inspectGPUs is openDriver for callers that only need the device list.
func inspectGPUs(env *Env, mode string) (*gpu.Driver, []gpu.Device, error) {
	drv, devs, err := openDriver(env, mode)
	if err != nil {
		return nil, nil, err
	}
	if err := drv.NVML.Shutdown(); err != nil {
		return nil, nil, fmt.Errorf("close NVML: %w", err)
	}
	return drv, devs, nil
}

// selectGPUs picks devices by comma-separated indices or UUIDs ("" = all).
func selectGPUs(devs []gpu.Device, spec string) ([]gpu.Device, error) {
	if len(devs) == 0 {
		return nil, fmt.Errorf("no GPU found")
	}
	if spec == "" {
		return devs, nil
	}
	var out []gpu.Device
	seen := map[int]bool{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		d, err := findGPU(devs, item)
		if err != nil {
			return nil, err
		}
		if !seen[d.Index] {
			seen[d.Index] = true
			out = append(out, d)
		}
	}
	return out, nil
}

func findGPU(devs []gpu.Device, item string) (gpu.Device, error) {
	if i, err := strconv.Atoi(item); err == nil {
		if i < 0 || i >= len(devs) {
			return gpu.Device{}, fmt.Errorf("GPU %d does not exist (this machine has %d: 0..%d)", i, len(devs), len(devs)-1)
		}
		return devs[i], nil
	}
	for _, d := range devs {
		if strings.EqualFold(d.UUID, item) {
			return d, nil
		}
	}
	return gpu.Device{}, fmt.Errorf("no GPU %q (want an index or a UUID)", item)
}
