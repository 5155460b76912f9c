package cli

import (
	"fmt"
	"github.com/spf13/cobra"
	"text/tabwriter"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/units"
)

func smiCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "smi [--driver auto|real|sim]",
		Short: "list GPUs, memory and processes as NVML shows them to this process (like nvidia-smi)",
		Long: "List GPUs, memory and processes as NVML shows them to this process. Inside a gpuslice group, NVML is\n" +
			"virtualized: the limit is the total, and only the group's processes are listed, with the PIDs this process sees.",
		Args: noArgs(env),
	}
	driver := driverFlag(env, cmd.Flags(), "GPU driver: auto, real or sim (env GPUSLICE_DRIVER)")
	cmd.RunE = func(*cobra.Command, []string) error { return runSMI(env, *driver) }
	return cmd
}

// runSMI prints what NVML reports to the calling process.
func runSMI(env *Env, driver string) error {
	drv, devs, err := openDriver(env, driver)
	if err != nil {
		return err
	}
	err = writeSMI(env, drv, devs)
	if shutdownErr := drv.NVML.Shutdown(); err == nil && shutdownErr != nil {
		err = fmt.Errorf("close NVML: %w", shutdownErr)
	}
	return err
}

func writeSMI(env *Env, drv *gpu.Driver, devs []gpu.Device) error {
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "driver %s\n\nGPU\tname\tUUID\tmemory used / total\tutilization\n", drv.Version)
	var procs []string
	for _, d := range devs {
		mem, err := drv.NVML.Memory(d.Index)
		if err != nil {
			return err
		}
		util, err := drv.NVML.Utilization(d.Index)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s / %s\t%d%%\n", d.Index, d.Name, d.UUID, units.FormatSize(mem.Used), units.FormatSize(mem.Total), util.GPU)
		ps, err := drv.NVML.Processes(d.Index)
		if err != nil {
			return err
		}
		for _, p := range ps {
			procs = append(procs, fmt.Sprintf("%d\t%d\t%s", d.Index, p.PID, units.FormatSize(p.UsedMemory)))
		}
	}
	fmt.Fprintf(tw, "\nGPU\tPID\tmemory\n")
	for _, p := range procs {
		fmt.Fprintln(tw, p)
	}
	if len(procs) == 0 {
		fmt.Fprintln(tw, "-\tno running processes\t")
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}
