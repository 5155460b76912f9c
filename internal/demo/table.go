package demo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints one scenario's outcomes: task, limit, peak memory, steps/s, result.
func WriteTable(w io.Writer, outs []Outcome) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "task\tlimit\ttime slice\tpeak memory\tsteps/s\tresult")
	for _, o := range outs {
		limit := "none"
		if o.Limit > 0 {
			limit = sizeGiB(o.Limit)
		}
		rate := "-"
		if o.Result == "ok" {
			rate = fmt.Sprintf("%.1f", o.StepsPerS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", o.Task, limit, o.Policy, sizeGiB(o.Peak), rate, describe(o))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

func describe(o Outcome) string {
	switch {
	case o.Result == "ok":
		return fmt.Sprintf("finished %d steps", o.Steps)
	case o.Result == "CUDA_ERROR_OUT_OF_MEMORY":
		return fmt.Sprintf("FAILED: out of memory while %s (step %d)", o.Phase, o.Steps)
	default:
		return fmt.Sprintf("FAILED: %s while %s", o.Result, o.Phase)
	}
}

func sizeGiB(n uint64) string { return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30)) }

// Compare says how much faster or slower each task ran with priorities
// (after) than with the equal split (before).
func Compare(before, after []Outcome) string {
	var b strings.Builder
	b.WriteString("speed with priorities vs. the equal split:")
	for i := range after {
		if i >= len(before) || before[i].StepsPerS == 0 || after[i].Result != "ok" {
			continue
		}
		fmt.Fprintf(&b, " %s %.2fx", after[i].Task, after[i].StepsPerS/before[i].StepsPerS)
		if i < len(after)-1 {
			b.WriteString(",")
		}
	}
	return b.String()
}
