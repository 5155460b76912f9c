package nodemetrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/nodestatus"
)

// TestDashboardNamesExist: every gpuslice metric the Grafana dashboard
// queries is one gpuslice-node serves (or the scheduler plugin's).
func TestDashboardNamesExist(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/gpuslice-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	m := New(Config{Status: func() (*nodestatus.Status, error) { return status(), nil }, Now: func() time.Time { return time.Unix(1000, 0) }})
	m.SetHealth(gpuA, true, "")
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{"gpuslice_scheduler_plugin_decisions_total": true, "gpuslice_scheduler_plugin_duration_seconds_bucket": true}
	for _, mf := range mfs {
		known[mf.GetName()] = true
		known[mf.GetName()+"_bucket"] = true
	}
	name := regexp.MustCompile(`gpuslice_[a-z_]+`)
	n := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, q := range name.FindAllString(tg.Expr, -1) {
				n++
				if !known[q] {
					t.Errorf("dashboard queries %s, which nothing serves", q)
				}
			}
		}
	}
	if n == 0 || !strings.Contains(string(b), "gpuslice_hotplug_latency_seconds_bucket") {
		t.Fatalf("dashboard has %d gpuslice queries", n)
	}
}
