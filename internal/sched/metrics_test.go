package sched

import (
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
)

func TestPluginMetricsBesideTheScheduler(t *testing.T) {
	m, err := newPluginMetrics()
	if err != nil {
		t.Fatal(err)
	}
	// The registry is the process's: what this run registered goes with it,
	// so that a run after it (go test -count, -shuffle) registers afresh.
	t.Cleanup(func() {
		for _, c := range []interface {
			metrics.Registerable
			IsCreated() bool
		}{m.decisions, m.duration, m.stateReads} {
			if c.IsCreated() && !legacyregistry.Registerer().Unregister(c) {
				t.Errorf("%s not registered", c.FQName())
			}
		}
	})
	m.done(pointFilter, resultFit, time.Now())
	m.done(pointFilter, resultFit, time.Now())
	m.done(pointReserve, resultConflict, time.Now())
	m.done(pointScore, "", time.Now())
	want := `
# HELP gpuslice_scheduler_plugin_decisions_total [ALPHA] Decisions of the GPUSlice plugin, by extension point and result.
# TYPE gpuslice_scheduler_plugin_decisions_total counter
gpuslice_scheduler_plugin_decisions_total{extension_point="Filter",result="fit"} 2
gpuslice_scheduler_plugin_decisions_total{extension_point="Reserve",result="conflict"} 1
`
	if err := testutil.GatherAndCompare(legacyregistry.DefaultGatherer, strings.NewReader(want), "gpuslice_scheduler_plugin_decisions_total"); err != nil {
		t.Fatal(err)
	}
	m.stateRead(stateNode)
	m.stateRead(stateGathered)
	m.stateRead(stateNode)
	want = `
# HELP gpuslice_scheduler_dra_state_reads_total [ALPHA] Allocated states handed to the DynamicResources plugin for a pod, by how they were read: the claim tracker's whole (gathered), the nominated node's pools alone (nominated_node), the ledger's candidate nodes' pools alone or none at all (ledger), or whole after the ledger could not tell (ledger_then_gathered).
# TYPE gpuslice_scheduler_dra_state_reads_total counter
gpuslice_scheduler_dra_state_reads_total{read="gathered"} 1
gpuslice_scheduler_dra_state_reads_total{read="nominated_node"} 2
`
	if err := testutil.GatherAndCompare(legacyregistry.DefaultGatherer, strings.NewReader(want), "gpuslice_scheduler_dra_state_reads_total"); err != nil {
		t.Fatal(err)
	}
	if _, err := newPluginMetrics(); err == nil {
		t.Fatal("a second registration succeeded")
	}
	var nilMetrics *pluginMetrics
	nilMetrics.done(pointBind, resultBound, time.Now()) // no metrics: no panic
	nilMetrics.stateRead(stateGathered)
}
