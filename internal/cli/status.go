package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/output"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
	"github.com/gpuslice/gpuslice/internal/units"
)

func statusCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [--run-dir DIR] [-o json|yaml|wide]",
		Short: "show GPU time and memory per GPU and group (from the node daemon)",
		Args:  noArgs(env),
	}
	runDir := cmd.Flags().String("run-dir", paths.RunDir(env.Getenv), "run directory (env GPUSLICE_RUN_DIR)")
	out := output.AddFlag(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return runStatus(cmd.Context(), env, *runDir, *out) }
	return cmd
}

func runStatus(ctx context.Context, env *Env, runDir string, f output.Format) error {
	socket := nodestatus.SocketPath(env.Getenv)
	if !client.Reachable(ctx, socket) {
		return fmt.Errorf("no node daemon answers on %s (gpuslice run starts one; or run gpuslice node)", socket)
	}
	st, err := nodestatus.Read(runDir)
	if err != nil {
		return err
	}
	if why := staleStatus(st, time.Now(), pidAlive); why != "" {
		fmt.Fprintf(env.Stderr, "gpuslice: warning: the status below, as of %s, is stale: %s\n",
			st.Time.Format(time.TimeOnly), why)
	}
	return writeStatus(env.Stdout, st, f)
}

// statusStaleAfter is the age past which a status is stale: the daemon
// rewrites it every 250 ms (timeslice.Config.StatusEvery).
const statusStaleAfter = 2 * time.Second

// staleStatus says why st, read at now, is no longer the daemon's current
// status ("" while it is): its writer is gone (alive says whether a pid
// lives), or it has not been rewritten for statusStaleAfter.
func staleStatus(st *nodestatus.Status, now time.Time, alive func(int) bool) string {
	if st.PID > 0 && !alive(st.PID) {
		return fmt.Sprintf("the node daemon that wrote it (pid %d) is gone", st.PID)
	}
	if age := now.Sub(st.Time); age > statusStaleAfter {
		return fmt.Sprintf("%v old: the node daemon (pid %d) stopped writing it", age.Round(time.Second), st.PID)
	}
	return ""
}

// pidAlive reports whether process pid exists (signal 0; EPERM: it exists).
func pidAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// writeStatus prints the daemon's status in format f.
func writeStatus(w io.Writer, st *nodestatus.Status, f output.Format) error {
	if f.Structured() {
		return output.Write(w, f, statusDoc(st))
	}
	burst := "on"
	if !st.Burst {
		burst = "off"
	}
	fmt.Fprintf(w, "node daemon pid %d, socket %s, period %v, burst buffers %s, as of %s\n",
		st.PID, st.Socket, time.Duration(st.PeriodNs), burst, st.Time.Format(time.TimeOnly))
	if len(st.GPUs) == 0 && len(st.Memory) == 0 {
		fmt.Fprintln(w, "no GPU in use")
		return nil
	}
	for _, g := range st.GPUs {
		holder := g.Holder
		if holder == "" {
			holder = "-"
		}
		fmt.Fprintf(w, "\n%s  holder: %s\n", g.UUID, holder)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		head := "GROUP\tPRIORITY\tSLICE\tEXPECTED\tACHIEVED(1s)\tGPU TIME\tBANKED\tPROCS\tMEMORY"
		if f == output.Wide {
			head += "\tSHARE\tSTATE\tGRANTS\tGRANTED\tREVOKES\tOVERRUNS\tOVERRUN P99\tOVERRUN MAX\tDEBT\tREFUSED"
		}
		fmt.Fprintln(tw, head)
		for _, e := range g.Groups {
			row := statusRow(e)
			if f == output.Wide {
				row = append(row, statusWide(e)...)
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return printElastic(w, st.Memory)
}

func statusRow(e nodestatus.GroupGPUStatus) []string {
	mem := "-"
	if e.MemoryMax > 0 || e.MemoryUsed > 0 {
		limit := "no limit"
		if e.MemoryMax > 0 {
			limit = units.FormatSize(e.MemoryMax)
		}
		mem = units.FormatSize(e.MemoryUsed) + " / " + limit
	}
	expected := fmt.Sprintf("%.1f%%", e.Expected*100)
	if e.ShareMax > 0 {
		expected += " (max " + group.FormatPercent(e.ShareMax) + ")"
	}
	return []string{e.Group, e.Priority, time.Duration(e.SliceNs).String(), expected,
		fmt.Sprintf("%.1f%%", e.AchievedShare*100), time.Duration(e.AchievedNs).Round(time.Millisecond).String(),
		time.Duration(e.BankedNs).Round(10 * time.Microsecond).String(), fmt.Sprint(e.Members), mem}
}

// statusWide is the wide table's extra columns.
func statusWide(e nodestatus.GroupGPUStatus) []string {
	share, state := "-", "idle"
	if e.Share > 0 {
		share = fmt.Sprintf("%.1f%%", e.Share*100)
	}
	switch {
	case e.Holding:
		state = "holding"
	case e.Waiting:
		state = "waiting"
	}
	ms := func(ns int64) string { return time.Duration(ns).Round(time.Microsecond).String() }
	return []string{share, state, fmt.Sprint(e.Grants), time.Duration(e.GrantedNs).Round(time.Millisecond).String(),
		fmt.Sprint(e.Revokes), fmt.Sprint(e.Overruns), ms(e.OverrunP99Ns), ms(e.OverrunMaxNs), ms(e.DebtNs),
		fmt.Sprint(e.MemoryRefused)}
}

// printElastic shows elastic memory per GPU: guaranteed, borrowed and spilled.
func printElastic(w io.Writer, gpus []nodestatus.MemoryGPUStatus) error {
	for _, g := range gpus {
		fmt.Fprintf(w, "\n%s  elastic memory\n", g.UUID)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
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
