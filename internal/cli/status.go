package cli

import (
	"context"
	"fmt"
	"github.com/spf13/cobra"
	"text/tabwriter"
	"time"

	"github.com/gpuslice/gpuslice/internal/node"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/internal/units"
)

func statusCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [--run-dir DIR]",
		Short: "show GPU time and memory per GPU and group (from the node daemon)",
		Args:  noArgs(env),
	}
	runDir := cmd.Flags().String("run-dir", paths.RunDir(env.Getenv), "run directory (env GPUSLICE_RUN_DIR)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return runStatus(cmd.Context(), env, *runDir) }
	return cmd
}

func runStatus(ctx context.Context, env *Env, runDir string) error {
	socket := node.SocketPath(env.Getenv)
	if !node.Reachable(ctx, socket) {
		return fmt.Errorf("no node daemon answers on %s (gpuslice run starts one; or run gpuslice node)", socket)
	}
	st, err := node.ReadStatus(runDir)
	if err != nil {
		return err
	}
	burst := "on"
	if !st.Burst {
		burst = "off"
	}
	fmt.Fprintf(env.Stdout, "node daemon pid %d, socket %s, period %v, burst buffers %s, as of %s\n",
		st.PID, st.Socket, time.Duration(st.PeriodNs), burst, st.Time.Format(time.TimeOnly))
	if len(st.GPUs) == 0 && len(st.Memory) == 0 {
		fmt.Fprintln(env.Stdout, "no GPU in use")
		return nil
	}
	for _, g := range st.GPUs {
		holder := g.Holder
		if holder == "" {
			holder = "-"
		}
		fmt.Fprintf(env.Stdout, "\n%s  holder: %s\n", g.UUID, holder)
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "GROUP\tPRIORITY\tSLICE\tEXPECTED\tACHIEVED(1s)\tGPU TIME\tBANKED\tPROCS\tMEMORY")
		for _, e := range g.Groups {
			mem := "-"
			if e.MemoryMax > 0 || e.MemoryUsed > 0 {
				limit := "no limit"
				if e.MemoryMax > 0 {
					limit = units.FormatSize(e.MemoryMax)
				}
				mem = units.FormatSize(e.MemoryUsed) + " / " + limit
			}
			fmt.Fprintf(tw, "%s\t%s\t%v\t%.1f%%\t%.1f%%\t%v\t%v\t%d\t%s\n", e.Group, e.Priority,
				time.Duration(e.SliceNs), e.Expected*100, e.AchievedShare*100,
				time.Duration(e.AchievedNs).Round(time.Millisecond), time.Duration(e.BankedNs).Round(10*time.Microsecond),
				e.Members, mem)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return printElastic(env, st.Memory)
}

// printElastic shows elastic memory per GPU: guaranteed, borrowed and spilled.
func printElastic(env *Env, gpus []node.MemoryGPUStatus) error {
	for _, g := range gpus {
		fmt.Fprintf(env.Stdout, "\n%s  elastic memory\n", g.UUID)
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "GROUP\tMIN\tMAX\tSPILL\tGUARANTEED\tBORROWED\tSPILLED\tALLOWANCE")
		for _, e := range g.Groups {
			spill := "none"
			if e.Spill {
				spill = "host"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Group, units.FormatSize(e.Min), units.FormatSize(e.Max),
				spill, units.FormatSize(e.Guaranteed), units.FormatSize(e.Borrowed), units.FormatSize(e.Spilled),
				units.FormatSize(e.Allowance))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
