package kubectlplugin

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/gpuslice/gpuslice/internal/output"
	"github.com/gpuslice/gpuslice/internal/units"
)

// size prints bytes as the CLI does everywhere (binary units).
func size(b int64) string {
	if b < 0 {
		return "-"
	}
	return units.FormatSize(uint64(b))
}

// WriteTop prints doc in format f; now ages the heartbeats of the wide table.
func WriteTop(w io.Writer, doc TopDoc, f output.Format, now time.Time) error {
	if f.Structured() {
		return output.Write(w, f, doc)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "NODE\tGPU\tMODEL\tMODE\tSTATE\tHEALTH\tUNITS\tMEMORY\tUTIL\tPODS"
	if f == output.Wide {
		head += "\tUUID\tUNITS FREE\tMEMORY FREE\tELASTIC (GUARANTEED/BORROWED/SPILLED)\tMPS CLIENTS\tOTHER PROCS\tHEARTBEAT"
	}
	fmt.Fprintln(tw, head)
	for _, n := range doc.Nodes {
		if len(n.GPUs) == 0 {
			fmt.Fprintf(tw, "%s\t-\tno GPU\t-\t%s\t-\t-\t-\t-\t0\n", n.Name, n.State)
			continue
		}
		for _, g := range n.GPUs {
			row := []string{n.Name, fmt.Sprint(g.Index), g.Model, g.SharingMode, n.State, g.Health,
				fmt.Sprintf("%d/%d", g.UnitsBooked, g.UnitsTotal),
				size(g.MemoryBookedBytes) + " / " + size(g.MemoryBytes),
				fmt.Sprintf("%d%%", g.UtilizationPercent), fmt.Sprint(g.Pods)}
			if f == output.Wide {
				row = append(row, g.UUID, fmt.Sprint(g.UnitsFree), size(g.MemoryFreeBytes),
					size(g.MemoryGuaranteedBytes)+" / "+size(g.MemoryBorrowedBytes)+" / "+size(g.MemorySpilledBytes),
					fmt.Sprint(g.MPSClients), fmt.Sprint(g.UnscheduledProcesses), age(now, n.Heartbeat))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
	}
	return tw.Flush()
}

// age is a heartbeat's age as kubectl prints ages ("-" for none).
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t))
}

// WritePods prints doc in format f.
func WritePods(w io.Writer, doc PodsDoc, f output.Format) error {
	if f.Structured() {
		return output.Write(w, f, doc)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "NAMESPACE\tPOD\tCONTAINER\tNODE\tGPU\tUNITS\tMEMORY\tPHASE"
	if f == output.Wide {
		head += "\tUUID\tEXCLUSIVE"
	}
	fmt.Fprintln(tw, head)
	for _, s := range doc.Items {
		row := []string{s.Namespace, s.Pod, s.Container, s.Node, fmt.Sprint(s.GPUIndex), fmt.Sprint(s.Units),
			size(s.MemoryBytes), s.Phase}
		if f == output.Wide {
			row = append(row, s.UUID, fmt.Sprint(s.Exclusive))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}
