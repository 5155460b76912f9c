package nodemetrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuslice/gpuslice/internal/nodestatus"
)

const gpuA = "GPU-00000000-0000-0000-0000-00000000000a"

func status() *nodestatus.Status {
	t0 := time.Unix(1000, 0)
	return &nodestatus.Status{Version: nodestatus.Version, Time: t0, Connections: 3, GPUs: []nodestatus.GPUStatus{{UUID: gpuA,
		Groups: []nodestatus.GroupGPUStatus{
			{Group: "a", Share: 0.3, Expected: 0.5, AchievedNs: 2e9, AchievedShare: 0.25, BankedNs: 5e6, Members: 2,
				Waiting: true, Grants: 7, GrantedNs: 3e9, Revokes: 4, MemoryMax: 1 << 30, MemoryUsed: 1 << 20, MemoryRefused: 2},
			{Group: "b", Expected: 0.5, AchievedNs: 1e9, Grants: 1, Members: 1},
			{Group: "c", AchievedNs: 1e9, Grants: 2, Waiting: true, MemoryUsed: 10},
		}}}}
}

func TestCollector(t *testing.T) {
	m := New(Config{Status: func() (*nodestatus.Status, error) { return status(), nil }, MaxGroups: 2,
		Now: func() time.Time { return time.Unix(1002, 0) }})
	want := `
# HELP gpuslice_group_gpu_memory_refused_allocations_total Allocations refused at the group's memory limit on the GPU.
# TYPE gpuslice_group_gpu_memory_refused_allocations_total counter
gpuslice_group_gpu_memory_refused_allocations_total{gpu="` + gpuA + `",group="_other"} 0
gpuslice_group_gpu_memory_refused_allocations_total{gpu="` + gpuA + `",group="a"} 2
gpuslice_group_gpu_memory_refused_allocations_total{gpu="` + gpuA + `",group="b"} 0
# HELP gpuslice_group_gpu_time_granted_seconds_total Sum of the time-slice grants handed to the group on the GPU.
# TYPE gpuslice_group_gpu_time_granted_seconds_total counter
gpuslice_group_gpu_time_granted_seconds_total{gpu="` + gpuA + `",group="_other"} 0
gpuslice_group_gpu_time_granted_seconds_total{gpu="` + gpuA + `",group="a"} 3
gpuslice_group_gpu_time_granted_seconds_total{gpu="` + gpuA + `",group="b"} 0
# HELP gpuslice_gpu_waiting_groups Groups waiting for a time slice on the GPU.
# TYPE gpuslice_gpu_waiting_groups gauge
gpuslice_gpu_waiting_groups{gpu="` + gpuA + `"} 2
# HELP gpuslice_daemon_connections Open client connections to the node daemon.
# TYPE gpuslice_daemon_connections gauge
gpuslice_daemon_connections 3
# HELP gpuslice_daemon_status_age_seconds Age of the node daemon's status at this scrape.
# TYPE gpuslice_daemon_status_age_seconds gauge
gpuslice_daemon_status_age_seconds 2
# HELP gpuslice_group_gpu_memory_used_bytes GPU memory the group holds on the GPU.
# TYPE gpuslice_group_gpu_memory_used_bytes gauge
gpuslice_group_gpu_memory_used_bytes{gpu="` + gpuA + `",group="_other"} 10
gpuslice_group_gpu_memory_used_bytes{gpu="` + gpuA + `",group="a"} 1.048576e+06
gpuslice_group_gpu_memory_used_bytes{gpu="` + gpuA + `",group="b"} 0
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "gpuslice_group_gpu_memory_refused_allocations_total",
		"gpuslice_group_gpu_time_granted_seconds_total", "gpuslice_gpu_waiting_groups", "gpuslice_daemon_connections",
		"gpuslice_daemon_status_age_seconds", "gpuslice_group_gpu_memory_used_bytes"); err != nil {
		t.Fatal(err)
	}
	if probs, err := testutil.GatherAndLint(m.Registry); err != nil || len(probs) > 0 {
		t.Fatalf("lint: %v %v", probs, err)
	}
}

func TestCollectorDaemonDown(t *testing.T) {
	m := New(Config{Status: func() (*nodestatus.Status, error) { return nil, errors.New("no status") }})
	want := "# HELP gpuslice_daemon_status_up 1 if the node daemon's status could be read at this scrape.\n" +
		"# TYPE gpuslice_daemon_status_up gauge\ngpuslice_daemon_status_up 0\n"
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "gpuslice_daemon_status_up"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(m.Registry, "gpuslice_group_gpu_grants_total"); err != nil || n != 0 {
		t.Fatalf("group series without a status: %d %v", n, err)
	}
}

func TestFold(t *testing.T) {
	g := status().GPUs[0].Groups
	for _, tc := range []struct {
		limit int
		want  []string
	}{{0, []string{"a", "b", "c"}}, {3, []string{"a", "b", "c"}}, {2, []string{"a", "b", OtherGroup}}, {1, []string{"a", OtherGroup}}} {
		out := Fold(g, tc.limit)
		var names []string
		var grants uint64
		for _, e := range out {
			names = append(names, e.Group)
			grants += e.Grants
		}
		if strings.Join(names, ",") != strings.Join(tc.want, ",") || grants != 10 {
			t.Errorf("limit %d: %v (grants %d), want %v (grants 10)", tc.limit, names, grants, tc.want)
		}
	}
}

func TestAgentInstruments(t *testing.T) {
	m := New(Config{Status: func() (*nodestatus.Status, error) { return status(), nil }})
	m.AllocateRefused("devices")
	m.Allocated()
	m.HotplugApplied(20 * time.Millisecond)
	m.SetHealth(gpuA, false, "xid")
	if v := testutil.ToFloat64(m.allocRefusals.WithLabelValues("devices")); v != 1 {
		t.Errorf("refusals %v", v)
	}
	if v := testutil.ToFloat64(m.healthy.WithLabelValues(gpuA)); v != 0 {
		t.Errorf("healthy %v", v)
	}
	if n := testutil.CollectAndCount(m.allocRefusals); n != 4 {
		t.Errorf("refusal series %d, want one per reason", n)
	}
	if n := testutil.CollectAndCount(m.hotplug); n != 1 {
		t.Errorf("hotplug series %d", n)
	}
}

func TestProbes(t *testing.T) {
	m := New(Config{Status: func() (*nodestatus.Status, error) { return status(), nil }})
	var ready atomic.Bool
	srv := httptest.NewServer(m.Handler([]Check{{Name: "ping", Run: func(context.Context) error { return nil }}},
		[]Check{{Name: "plugin", Run: func(context.Context) error {
			if !ready.Load() {
				return errors.New("not yet")
			}
			return nil
		}}}))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("healthz %d %q", code, body)
	}
	if code, body := get("/readyz"); code != 500 || !strings.Contains(body, "[-]plugin failed: not yet") {
		t.Errorf("readyz %d %q", code, body)
	}
	ready.Store(true)
	if code, body := get("/readyz?verbose"); code != 200 || body != "[+]plugin ok\nok\n" {
		t.Errorf("readyz %d %q", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "gpuslice_group_gpu_grants_total{") {
		t.Errorf("metrics %d", code)
	}
}

func TestMIGMetrics(t *testing.T) {
	m := New(Config{Status: func() (*nodestatus.Status, error) { return status(), nil }})
	m.SetMIGInstances([]MIGInstance{{GPU: gpuA, UUID: "MIG-1", Profile: "3g.40gb", Placement: 4, MadeBy: "claim", Claims: 2},
		{GPU: gpuA, UUID: "MIG-2", Profile: "1g.10gb", Placement: 0, MadeBy: "admin"}})
	m.MIGMade()
	m.MIGMade()
	m.MIGDestroyed()
	want := `
# HELP gpuslice_mig_instance_claims Prepared DRA claims holding the MIG instance (one series per instance on the node).
# TYPE gpuslice_mig_instance_claims gauge
gpuslice_mig_instance_claims{gpu="` + gpuA + `",made_by="admin",placement="0",profile="1g.10gb",uuid="MIG-2"} 0
gpuslice_mig_instance_claims{gpu="` + gpuA + `",made_by="claim",placement="4",profile="3g.40gb",uuid="MIG-1"} 2
# HELP gpuslice_mig_instances_made_total MIG instances the DRA driver made for claims.
# TYPE gpuslice_mig_instances_made_total counter
gpuslice_mig_instances_made_total 2
# HELP gpuslice_mig_instances_destroyed_total MIG instances the DRA driver destroyed once no claim held them.
# TYPE gpuslice_mig_instances_destroyed_total counter
gpuslice_mig_instances_destroyed_total 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "gpuslice_mig_instance_claims",
		"gpuslice_mig_instances_made_total", "gpuslice_mig_instances_destroyed_total"); err != nil {
		t.Fatal(err)
	}
	m.SetMIGInstances(nil)
	if n := testutil.CollectAndCount(m.Registry, "gpuslice_mig_instance_claims"); n != 0 {
		t.Fatalf("%d instance series after all were destroyed", n)
	}
}
