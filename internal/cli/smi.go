package cli

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/output"
	"github.com/gpuslice/gpuslice/internal/units"
)

func smiCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "smi [--driver auto|real|sim] [-o json|yaml|wide]",
		Short: "list GPUs, memory and processes as NVML shows them to this process (like nvidia-smi)",
		Long: "List GPUs, memory and processes as NVML shows them to this process. Inside a gpuslice group, NVML is\n" +
			"virtualized: the limit is the total, and only the group's processes are listed, with the PIDs this process sees.",
		Args: noArgs(env),
	}
	driver := driverFlag(env, cmd.Flags(), "GPU driver: auto, real or sim (env GPUSLICE_DRIVER)")
	out := output.AddFlag(cmd.Flags())
	cmd.RunE = func(*cobra.Command, []string) error { return runSMI(env, *driver, *out) }
	return cmd
}

// runSMI prints what NVML reports to the calling process.
func runSMI(env *Env, driver string, f output.Format) error {
	drv, devs, err := openDriver(env, driver)
	if err != nil {
		return err
	}
	doc, err := readSMI(drv, devs)
	if shutdownErr := drv.NVML.Shutdown(); err == nil && shutdownErr != nil {
		err = fmt.Errorf("close NVML: %w", shutdownErr)
	}
	if err != nil {
		return err
	}
	return writeSMI(env.Stdout, doc, f)
}

func readSMI(drv *gpu.Driver, devs []gpu.Device) (SMIDoc, error) {
	doc := SMIDoc{TypeMeta: output.Meta("SMI"), Driver: drv.Version, Simulated: drv.Simulated, GPUs: []SMIGPU{}}
	for _, d := range devs {
		mem, err := drv.NVML.Memory(d.Index)
		if err != nil {
			return doc, err
		}
		util, err := drv.NVML.Utilization(d.Index)
		noUtil := errors.Is(err, gpu.ErrNotSupported) // a GPU in MIG mode
		if err != nil && !noUtil {
			return doc, err
		}
		ps, err := drv.NVML.Processes(d.Index)
		if err != nil {
			return doc, err
		}
		g := SMIGPU{Index: d.Index, Name: d.Name, UUID: d.UUID, MemoryTotal: mem.Total, MemoryUsed: mem.Used,
			MemoryFree: mem.Free, Utilization: util.GPU, MemoryUtilization: util.Memory, UtilizationNotSupported: noUtil,
			Processes: []SMIProcess{}}
		for _, p := range ps {
			g.Processes = append(g.Processes, SMIProcess{PID: p.PID, Memory: p.UsedMemory})
		}
		doc.GPUs = append(doc.GPUs, g)
	}
	return doc, nil
}

func writeSMI(w io.Writer, doc SMIDoc, f output.Format) error {
	if f.Structured() {
		return output.Write(w, f, doc)
	}
	wide := f == output.Wide
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "GPU\tname\tUUID\tmemory used / total\tutilization"
	if wide {
		head += "\tmemory free\tmemory utilization"
	}
	fmt.Fprintf(tw, "driver %s\n\n%s\n", doc.Driver, head)
	var procs []string
	for _, d := range doc.GPUs {
		util, memUtil := fmt.Sprintf("%d%%", d.Utilization), fmt.Sprintf("%d%%", d.MemoryUtilization)
		if d.UtilizationNotSupported {
			util, memUtil = "n/a", "n/a"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s / %s\t%s", d.Index, d.Name, d.UUID, units.FormatSize(d.MemoryUsed), units.FormatSize(d.MemoryTotal), util)
		if wide {
			fmt.Fprintf(tw, "\t%s\t%s", units.FormatSize(d.MemoryFree), memUtil)
		}
		fmt.Fprintln(tw)
		for _, p := range d.Processes {
			procs = append(procs, fmt.Sprintf("%d\t%d\t%s", d.Index, p.PID, units.FormatSize(p.Memory)))
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
