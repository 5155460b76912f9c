package alloc

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

const gib = int64(1) << 30

func cfg() Config {
	return Config{UtilizationThreshold: 90, HeartbeatTimeout: 30 * time.Second, DefaultPlacement: api.PlacementBinpack}
}

func node(name string, n int) Node {
	nd := Node{Name: name, State: v1alpha2.NodeWorking}
	for i := 0; i < n; i++ {
		nd.GPUs = append(nd.GPUs, GPU{Index: int32(i), UUID: fmt.Sprintf("GPU-%s-%d", name, i), UnitsTotal: 100, MemoryBytes: 16 * gib, Healthy: true})
	}
	return nd
}

// setNode records n with a Lease renewed at t0, held a minute.
func setNode(b *Books, n Node) {
	b.SetNode(n)
	b.SetLease(n.Name, Lease{Renewed: t0, Duration: time.Minute})
}

func share(units, memGiB int64) *api.PodRequest {
	return &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: 1, Units: units, MemoryBytes: memGiB * gib}}}
}

func whole(n int) *api.PodRequest {
	return &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: n, Whole: true}}}
}

func indices(a *api.Assignment) string {
	var s []string
	for _, c := range a.Containers {
		for _, g := range c.GPUs {
			s = append(s, fmt.Sprintf("%d:%d", g.Index, g.Units))
		}
	}
	return strings.Join(s, ",")
}

// mustReserve fits and reserves req on n1 under uid.
func mustReserve(t *testing.T, b *Books, uid string, req *api.PodRequest) *api.Assignment {
	t.Helper()
	a, err := b.Fit("n1", req, t0)
	if err != nil {
		t.Fatalf("fit %s: %v", uid, err)
	}
	if err := b.Reserve(uid, a); err != nil {
		t.Fatalf("reserve %s: %v", uid, err)
	}
	return a
}

func TestFitPlacement(t *testing.T) {
	cases := []struct {
		name    string
		policy  api.Placement
		setup   []*api.PodRequest // reserved first, in order
		req     *api.PodRequest
		want    string
		wantErr string
	}{
		{"first-fit whole", api.PlacementFirstFit, nil, whole(2), "0:100,1:100", ""},
		{"first-fit share", api.PlacementFirstFit, []*api.PodRequest{share(50, 1)}, share(30, 1), "0:30", ""},
		{"binpack fills used gpu", api.PlacementBinpack, []*api.PodRequest{whole(1), share(50, 1)}, share(30, 1), "1:30", ""},
		{"binpack skips too full gpu", api.PlacementBinpack, []*api.PodRequest{whole(1), share(80, 1)}, share(30, 1), "2:30", ""},
		{"spread takes emptiest", api.PlacementSpread, []*api.PodRequest{share(50, 1), share(50, 1)}, share(30, 1), "2:30", ""},
		{"whole skips partly used", api.PlacementFirstFit, []*api.PodRequest{share(10, 0)}, whole(1), "1:100", ""},
		{"memory limits", api.PlacementFirstFit, []*api.PodRequest{share(10, 10), share(10, 10), share(10, 10), share(10, 10)}, share(10, 10), "", "needs 1 GPUs with 10 units"},
		{"too many whole", api.PlacementFirstFit, []*api.PodRequest{share(10, 0)}, whole(4), "", "needs 4 whole GPUs, 3 free"},
		{"exclusive not shared", api.PlacementFirstFit, []*api.PodRequest{whole(4)}, share(1, 0), "", "4 held whole"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg()
			c.DefaultPlacement = tc.policy
			b := NewBooks(c)
			setNode(b, node("n1", 4))
			for i, r := range tc.setup {
				mustReserve(t, b, fmt.Sprint("setup", i), r)
			}
			a, err := b.Fit("n1", tc.req, t0)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := indices(a); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPerPodOverride(t *testing.T) {
	b := NewBooks(cfg()) // binpack default
	setNode(b, node("n1", 2))
	mustReserve(t, b, "p0", share(50, 1))
	req := share(10, 0)
	if a, _ := b.Fit("n1", req, t0); indices(a) != "0:10" {
		t.Fatalf("binpack: %s", indices(a))
	}
	req.Placement = api.PlacementSpread
	if a, _ := b.Fit("n1", req, t0); indices(a) != "1:10" {
		t.Fatalf("spread override: %s", indices(a))
	}
}

func TestFitExclusions(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*Node, *Config)
		want string
	}{
		{"unhealthy", func(n *Node, _ *Config) { n.GPUs[0].Healthy = false }, "1 unhealthy"},
		{"utilization", func(n *Node, _ *Config) { n.GPUs[0].UtilizationPercent = 91 }, "1 over the utilization threshold"},
		{"foreign processes", func(n *Node, _ *Config) { n.GPUs[0].UnscheduledProcesses = 2 }, "1 busy with unscheduled processes"},
		{"foreign allowed", func(n *Node, c *Config) { n.GPUs[0].UnscheduledProcesses = 2; c.AllowUnscheduledProcesses = true }, ""},
		{"at threshold", func(n *Node, _ *Config) { n.GPUs[0].UtilizationPercent = 90 }, ""},
		{"draining", func(n *Node, _ *Config) { n.State = v1alpha2.NodeDraining }, "is Draining"},
		{"not ready", func(n *Node, _ *Config) { n.State = v1alpha2.NodeNotReady }, "is NotReady"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg()
			n := node("n1", 1)
			tc.mut(&n, &c)
			b := NewBooks(c)
			setNode(b, n)
			_, err := b.Fit("n1", share(10, 1), t0)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	b := NewBooks(cfg())
	if _, err := b.Fit("nowhere", share(1, 0), t0); err == nil || !strings.Contains(err.Error(), "no GPUNode entry") {
		t.Fatalf("missing node: %v", err)
	}
}

func TestMultiContainerSharesAndDistinctGPUs(t *testing.T) {
	b := NewBooks(Config{UtilizationThreshold: 100, HeartbeatTimeout: time.Minute, DefaultPlacement: api.PlacementFirstFit})
	setNode(b, node("n1", 2))
	req := &api.PodRequest{Containers: []api.ContainerRequest{
		{Name: "a", Count: 2, Units: 60},
		{Name: "b", Count: 1, Units: 40},
		{Name: "c", Count: 1, Units: 40},
	}}
	a, err := b.Fit("n1", req, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := indices(a); got != "0:60,1:60,0:40,1:40" {
		t.Fatalf("got %s", got)
	}
	req.Containers = append(req.Containers, api.ContainerRequest{Name: "d", Count: 1, Units: 1})
	if _, err := b.Fit("n1", req, t0); err == nil {
		t.Fatal("a fifth share fit into two full GPUs")
	}
}

func TestReserveConflictAndRelease(t *testing.T) {
	b := NewBooks(cfg())
	setNode(b, node("n1", 1))
	a1, _ := b.Fit("n1", share(60, 1), t0)
	a2, _ := b.Fit("n1", share(60, 1), t0) // computed on the same books: a race
	if err := b.Reserve("p1", a1); err != nil {
		t.Fatal(err)
	}
	if err := b.Reserve("p2", a2); err == nil || !strings.Contains(err.Error(), "no longer has") {
		t.Fatalf("second reserve: %v", err)
	}
	if err := b.Reserve("p1", a1); err == nil {
		t.Fatal("double reserve of one pod succeeded")
	}
	b.Release("p1")
	b.Release("p1") // idempotent
	if u := b.Usage("n1"); len(u) != 0 || b.Pods() != 0 {
		t.Fatalf("after release: %+v", u)
	}
	if err := b.Reserve("p2", a2); err != nil {
		t.Fatalf("reserve after release: %v", err)
	}
}

func TestRebuildFromAssignments(t *testing.T) {
	live := NewBooks(cfg())
	setNode(live, node("n1", 4))
	var held []*api.Assignment
	for i, r := range []*api.PodRequest{whole(1), share(30, 2), share(30, 2), whole(2), share(50, 1)} {
		if a, err := live.Fit("n1", r, t0); err == nil {
			if err := live.Reserve(fmt.Sprint(i), a); err != nil {
				t.Fatal(err)
			}
			held = append(held, a)
		}
	}
	// A restarted scheduler sees the annotations before the table row.
	again := NewBooks(cfg())
	for i, a := range held {
		again.Add(fmt.Sprint(i), a)
	}
	setNode(again, node("n1", 4))
	if fmt.Sprint(again.Usage("n1")) != fmt.Sprint(live.Usage("n1")) {
		t.Fatalf("rebuilt %v, live %v", again.Usage("n1"), live.Usage("n1"))
	}
	if oc := again.Overcommitted(); len(oc) != 0 {
		t.Fatalf("overcommitted: %v", oc)
	}
	// An outside assignment that over-commits is booked and reported.
	bad := &api.Assignment{Version: api.AssignmentVersion, Node: "n1", Containers: []api.ContainerAssignment{{Name: "x", GPUs: []api.GPUAssignment{{Index: 0, UUID: "GPU-n1-0", Units: 1}}}}}
	again.Add("outsider", bad)
	if oc := again.Overcommitted(); fmt.Sprint(oc) != "[n1/0]" {
		t.Fatalf("overcommitted = %v", oc)
	}
	again.Release("outsider")
	again.RemoveNode("n1")
	if _, err := again.Fit("n1", share(1, 0), t0); err == nil {
		t.Fatal("fit on removed node")
	}
	for i := range held {
		again.Release(fmt.Sprint(i))
	}
	if again.Pods() != 0 || len(again.nodes) != 0 {
		t.Fatalf("books not empty: %d pods, %d nodes", again.Pods(), len(again.nodes))
	}
}

func TestScore(t *testing.T) {
	b := NewBooks(cfg())
	setNode(b, node("n1", 2))
	setNode(b, node("n2", 2))
	a0, _ := b.Fit("n1", whole(1), t0)
	if err := b.Reserve("p0", a0); err != nil {
		t.Fatal(err)
	}
	req := share(50, 8)
	if s1, s2 := b.Score("n1", req), b.Score("n2", req); s1 != 75 || s2 != 25 {
		t.Fatalf("binpack scores n1=%d n2=%d, want 75 > 25", s1, s2)
	}
	if s := b.Score("n2", whole(2)); s != 100 {
		t.Fatalf("binpack whole(2) on an empty 2-GPU node = %d, want 100", s)
	}
	req.Placement = api.PlacementSpread
	if s1, s2 := b.Score("n1", req), b.Score("n2", req); s1 != 25 || s2 != 75 {
		t.Fatalf("spread scores n1=%d n2=%d", s1, s2)
	}
	req.Placement = api.PlacementFirstFit
	if s1, s2 := b.Score("n1", req), b.Score("n2", req); s1 != s2 {
		t.Fatalf("first-fit scores differ: %d %d", s1, s2)
	}
	if s := b.Score("nowhere", req); s != 0 {
		t.Fatalf("unknown node scored %d", s)
	}
}

// TestCheckAgreesWithFit: the allocation-free check gives the same verdict
// as Fit for every request, including multi-container ones.
func TestCheckAgreesWithFit(t *testing.T) {
	b := NewBooks(cfg())
	setNode(b, node("n1", 4))
	mustReserve(t, b, "p0", share(70, 1))
	mustReserve(t, b, "p1", whole(1))
	reqs := []*api.PodRequest{share(30, 1), share(31, 1), whole(2), whole(3),
		{Containers: []api.ContainerRequest{{Name: "a", Count: 2, Units: 60}, {Name: "b", Count: 2, Units: 40}}},
		{Containers: []api.ContainerRequest{{Name: "a", Count: 2, Units: 60}, {Name: "b", Count: 1, Units: 41}, {Name: "c", Count: 1, Whole: true}}}}
	for i, r := range reqs {
		_, ferr := b.Fit("n1", r, t0)
		cerr := b.Check("n1", r, t0)
		if (ferr == nil) != (cerr == nil) {
			t.Fatalf("request %d: Fit %v, Check %v", i, ferr, cerr)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := cfg().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Config{UtilizationThreshold: 101, DefaultPlacement: "tight"}
	err := bad.Validate()
	for _, w := range []string{"utilizationThreshold 101", "heartbeatTimeout", `placement "tight"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("err = %v, want %q", err, w)
		}
	}
}

// A node counts as gone without a Lease, or once its Lease is older than
// its own duration or the configured HeartbeatTimeout (30s), whichever is
// shorter; the Lease and the row come and go independently.
func TestLeaseExpiry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lease *Lease
		want  string
	}{
		{"no lease", nil, "no gpuslice Lease"},
		{"fresh", &Lease{Renewed: t0.Add(-29 * time.Second), Duration: 40 * time.Second}, ""},
		{"past the timeout", &Lease{Renewed: t0.Add(-31 * time.Second), Duration: 40 * time.Second}, "Lease expired (renewed 31s ago, holds 30s)"},
		{"past its duration", &Lease{Renewed: t0.Add(-11 * time.Second), Duration: 10 * time.Second}, "Lease expired (renewed 11s ago, holds 10s)"},
		{"no duration", &Lease{Renewed: t0.Add(-20 * time.Second)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBooks(cfg())
			b.SetNode(node("n1", 1))
			if tc.lease != nil {
				b.SetLease("n1", *tc.lease)
			}
			_, err := b.Fit("n1", share(10, 1), t0)
			free := b.FreeWhole("n1", t0)
			if tc.want == "" {
				if err != nil || len(free) != 1 {
					t.Fatalf("fit %v, free %d", err, len(free))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || free != nil {
				t.Fatalf("err = %v, free %d, want %q", err, len(free), tc.want)
			}
		})
	}
	b := NewBooks(cfg())
	setNode(b, node("n1", 1))
	b.RemoveNode("n1")
	b.SetNode(node("n1", 1)) // the Lease outlived the row
	if _, err := b.Fit("n1", share(10, 1), t0); err != nil {
		t.Fatal(err)
	}
	b.RemoveLease("n1")
	if _, err := b.Fit("n1", share(10, 1), t0); err == nil {
		t.Fatal("fit without a Lease")
	}
}
