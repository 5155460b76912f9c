// Command bench schedules the same GPU pods on the same KWOK cluster with the
// stock kube-scheduler and with gpuslice-scheduler and prints throughput,
// latency and placement quality (see README.md). Run it with make
// bench-scheduler.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

func main() {
	var o options
	var scales string
	flag.StringVar(&o.scheduler, "scheduler", "bin/gpuslice-scheduler", "gpuslice-scheduler binary")
	flag.StringVar(&scales, "nodes", "1000 5000", "node counts to run, space separated")
	flag.IntVar(&o.pods, "pods", 3000, "pods per run")
	flag.IntVar(&o.gpus, "gpus", 8, "GPUs per node")
	flag.IntVar(&o.clients, "clients", 16, "concurrent pod creators")
	flag.IntVar(&o.rounds, "rounds", 2, "alternating stock/gpuslice rounds per scale (the box is noisy)")
	flag.IntVar(&o.preemptNodes, "preempt-nodes", 1000, "scale (node count) whose cluster also runs the preemption phase (0: none)")
	flag.IntVar(&o.preemptors, "preemptors", 200, "priority-1000 pods of the preemption phase")
	flag.Float64Var(&o.preemptRate, "preempt-rate", 0, "preemptors created per second, evenly spaced (0: all at once, a burst from -clients creators)")
	var rates string
	flag.StringVar(&rates, "preempt-rates", "", "after the preemption phase's run, run it again on the same cluster at each of these rates per second (space separated), stock kube-scheduler and gpuslice-scheduler alternately per rate, and print the highest rate with p99 < 2 s for each (ratesweep.go)")
	flag.DurationVar(&o.preemptRatesCap, "preempt-rates-cap", 20*time.Second, "-preempt-rates: each run waits at most this long after its last preemptor arrived (a p99 not reached prints as \"> cap\")")
	flag.BoolVar(&o.stockPreempt, "stock-preempt", true, "before gpuslice-scheduler's preemption phase, run the stock kube-scheduler's preemption on the same full cluster (same preemptors and arrival) for a baseline, then put the victims back (adds ~40 s at 1,000 nodes)")
	flag.BoolVar(&o.stockQueueSort, "stock-queue-sort", false, "gpuslice-scheduler keeps kube-scheduler's PrioritySort (figures before GPUSliceQueueSort)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory with logs")
	var draScale int
	flag.IntVar(&draScale, "dra-nodes", 1000, "the node count at which the DRA part runs (0: none)")
	flag.IntVar(&o.draPods, "dra-pods", 1000, "pods per DRA run")
	flag.IntVar(&o.draRounds, "dra-rounds", 2, "rounds of fractional and whole-GPU DRA runs side by side (in turn)")
	flag.IntVar(&o.draPreemptNodes, "dra-preempt-nodes", 1000, "after the DRA runs, nodes whose every GPU is filled with priority-0 claims for the DRA preemption phase (0: none; the default is the preemption phase's -preempt-nodes, so that the two p99s compare the same burst on the same full cluster)")
	flag.IntVar(&o.draPreemptors, "dra-preemptors", 200, "priority-1000 claim pods of the DRA preemption phase (stock kube-scheduler, then gpuslice-scheduler; the default is -preemptors')")
	flag.DurationVar(&o.draStockWait, "dra-stock-wait", 30*time.Second, "how long the DRA preemption phase waits for the stock kube-scheduler's preemptors")
	flag.BoolVar(&o.auditWrites, "audit-writes", false, "the API server logs every write (audit, blocking: slower); the preemption phase prints its writes by client")
	flag.StringVar(&o.apiProfile, "apiserver-profile", "", "write a CPU profile of kube-apiserver from the preemption burst on to this file (-preempt-profile-seconds long)")
	var extra string
	o.profile = &cpuProfile{}
	flag.StringVar(&o.profile.path, "preempt-profile", "", "write a CPU profile of gpuslice-scheduler from the preemption burst on to this file (and its allocation profiles before and after the phase to FILE.allocs0 and FILE.allocs1)")
	flag.IntVar(&o.profile.seconds, "preempt-profile-seconds", 20, "length of the -preempt-profile profile")
	o.draProfile = &cpuProfile{}
	flag.StringVar(&o.draProfile.path, "dra-profile", "", "write a CPU profile of gpuslice-scheduler placing the DRA claims (the dra-gpuslice run, DynamicResources inside it) to this file (and its allocation profiles before the pods and once all are bound to FILE.allocs0 and FILE.allocs1)")
	flag.IntVar(&o.draProfile.seconds, "dra-profile-seconds", 10, "length of the -dra-profile profile, from the first pod on (must end before the run does)")
	o.draPreemptProfile = &cpuProfile{}
	flag.StringVar(&o.draPreemptProfile.path, "dra-preempt-profile", "", "write a CPU profile of gpuslice-scheduler over the DRA preemption phase, from the first preemptor on, to this file (and its allocation profiles before and after to FILE.allocs0 and FILE.allocs1)")
	flag.IntVar(&o.draPreemptProfile.seconds, "dra-preempt-profile-seconds", 10, "length of the -dra-preempt-profile profile")
	flag.StringVar(&o.draAPIProfile, "dra-apiserver-profile", "", "write CPU profiles of kube-apiserver over the DRA runs (-dra-profile-seconds from the first pod on): FILE for dra-gpuslice, FILE.stock for the first round's dra-shares, FILE.plugin for plugin-shares")
	flag.StringVar(&o.draPreemptAPIProfile, "dra-preempt-apiserver-profile", "", "write a CPU profile of kube-apiserver over the DRA preemption phase's gpuslice-scheduler run, from the first preemptor on (-dra-preempt-profile-seconds long), to this file")
	flag.StringVar(&extra, "gpuslice-args", "", "extra gpuslice-scheduler flags, space separated (e.g. to serve pprof)")
	flag.Parse()
	o.extraArgs = strings.Fields(extra)
	var err error
	if o.preemptRates, err = parseRates(rates); err != nil {
		fmt.Fprintf(os.Stderr, "bench: -preempt-rates: %v\n", err)
		os.Exit(2)
	}
	if len(o.preemptRates) > 0 && o.preemptRatesCap <= 0 {
		fmt.Fprintln(os.Stderr, "bench: -preempt-rates-cap must be > 0")
		os.Exit(2)
	}
	// (each rate of the sweep: two runs, each with start-up, the arrivals,
	// at most the cap and the restore)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute+time.Duration(len(o.preemptRates))*(5*time.Minute+2*o.preemptRatesCap))
	defer cancel()
	ctx = klog.NewContext(ctx, klog.Background())
	var last string
	var before []string // lines before the last one: preemption, DRA
	for _, f := range strings.Fields(scales) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "bench: bad node count %q\n", f)
			os.Exit(2)
		}
		o.nodes = n
		dra := o
		if n != draScale {
			dra.draPods = 0
		}
		line, more, err := runScale(ctx, dra)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %d nodes: %v\n", n, err)
			os.Exit(1)
		}
		last = line
		before = append(before, more...)
	}
	// "preemption p99 <ms> ms from creation to binding, <v> victims per preemption",
	// "dra X pods/s, plugin Y pods/s, whole-GPU dra Z pods/s",
	// "dra placement gpuslice X pods/s, stock Y pods/s, plugin Z pods/s",
	// "dra preemption p99 <ms> ms from creation to binding, <v> victims per preemption, stock bound <n>/<m>"
	for _, l := range before {
		fmt.Println(l)
	}
	fmt.Println(last)
}
