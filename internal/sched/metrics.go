package sched

import (
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Extension points and results, the label values of the plugin's metrics
// (fixed sets: bounded cardinality).
const (
	pointPreFilter  = "PreFilter"
	pointFilter     = "Filter"
	pointPostFilter = "PostFilter"
	pointScore      = "Score"
	pointReserve    = "Reserve"
	pointBind       = "Bind"

	resultSkip       = "skip"       // PreFilter: no GPU request
	resultDRA        = "dra"        // PreFilter: no GPU request, ResourceClaims
	resultInvalid    = "invalid"    // PreFilter: malformed request
	resultCandidates = "candidates" // PreFilter: only the best nodes go on
	resultAllNodes   = "all_nodes"  // PreFilter: every node goes on
	resultNominated  = "nominated"  // PreFilter: the pod's nominated node alone goes on
	resultFit        = "fit"        // Filter: the node has room
	resultNoFit      = "no_fit"     // Filter: it does not
	resultWidened    = "widened"    // PostFilter: retried on every node
	resultParked     = "parked"     // PostFilter: waits for capacity
	resultPreempted  = "preempted"  // PostFilter: victims chosen and being evicted
	resultReserved   = "reserved"   // Reserve: GPUs booked
	resultConflict   = "conflict"   // Reserve: lost a race since Filter
	resultBound      = "bound"      // Bind: bound with the assignment
	resultError      = "error"      // Bind: the API call failed
)

// pluginMetrics are the plugin's decisions and latencies, registered in the
// component-base legacy registry that kube-scheduler serves on /metrics
// beside its own.
type pluginMetrics struct {
	decisions *metrics.CounterVec
	duration  *metrics.HistogramVec
	// stateReads: how the allocated state handed to the DynamicResources
	// plugin was read (stateGathered, stateNode, stateLedger, stateLedgerThenGathered).
	stateReads *metrics.CounterVec
}

// How the allocated state a pod's DynamicResources PreFilter starts from
// was read (dranominee.go).
const (
	stateGathered = "gathered"       // the claim tracker's, whole
	stateNode     = "nominated_node" // the nominated node's pools alone
	// stateLedger: the ledger's candidate nodes' pools alone, or none (no
	// node has the share free, draledger.go); stateLedgerThenGathered:
	// then whole (the ledger could not tell).
	stateLedger             = "ledger"
	stateLedgerThenGathered = "ledger_then_gathered"
)

// newPluginMetrics registers the plugin's metrics. A second plugin instance
// (a second profile) in the same process gets unregistered instruments: the
// first profile's figures are the ones served.
func newPluginMetrics() (*pluginMetrics, error) {
	m := &pluginMetrics{
		decisions: metrics.NewCounterVec(&metrics.CounterOpts{Namespace: "gpuslice", Subsystem: "scheduler",
			Name: "plugin_decisions_total", StabilityLevel: metrics.ALPHA,
			Help: "Decisions of the GPUSlice plugin, by extension point and result."},
			[]string{"extension_point", "result"}),
		duration: metrics.NewHistogramVec(&metrics.HistogramOpts{Namespace: "gpuslice", Subsystem: "scheduler",
			Name: "plugin_duration_seconds", StabilityLevel: metrics.ALPHA,
			Help:    "Time the GPUSlice plugin spent at each extension point, per call.",
			Buckets: metrics.ExponentialBuckets(1e-6, 4, 12)},
			[]string{"extension_point"}),
		stateReads: metrics.NewCounterVec(&metrics.CounterOpts{Namespace: "gpuslice", Subsystem: "scheduler",
			Name: "dra_state_reads_total", StabilityLevel: metrics.ALPHA,
			Help: "Allocated states handed to the DynamicResources plugin for a pod, by how they were read: the claim tracker's whole (gathered), the nominated node's pools alone (nominated_node), the ledger's candidate nodes' pools alone or none at all (ledger), or whole after the ledger could not tell (ledger_then_gathered)."},
			[]string{"read"}),
	}
	for _, c := range []metrics.Registerable{m.decisions, m.duration, m.stateReads} {
		if err := legacyregistry.Register(c); err != nil {
			return m, err
		}
	}
	return m, nil
}

// stateRead counts one allocated state read as read says.
func (m *pluginMetrics) stateRead(read string) {
	if m != nil && m.stateReads != nil {
		m.stateReads.WithLabelValues(read).Inc()
	}
}

// done records one call of point that started at start, with its result
// ("" records only the latency).
func (m *pluginMetrics) done(point, result string, start time.Time) {
	if m == nil {
		return
	}
	m.duration.WithLabelValues(point).Observe(time.Since(start).Seconds())
	if result != "" {
		m.decisions.WithLabelValues(point, result).Inc()
	}
}
