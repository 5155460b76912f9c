package alloc

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// randomNode is a node of 1-4 GPUs of mixed health, utilization, sharing
// mode and foreign processes.
func randomNode(r *rand.Rand, name string) Node {
	n := node(name, 1+r.IntN(4))
	for i := range n.GPUs {
		g := &n.GPUs[i]
		g.Healthy = r.IntN(8) > 0
		g.UtilizationPercent = int32(r.IntN(100))
		if r.IntN(8) == 0 {
			g.UnscheduledProcesses = 1
		}
		if r.IntN(3) == 0 {
			g.Mode, g.UnitsFree = api.SharingMPS, int64(r.IntN(101))
		}
	}
	return n
}

// randomRequests are shares and whole GPUs of one or two containers, in
// every sharing mode.
func randomRequest2(r *rand.Rand) *api.PodRequest {
	req := &api.PodRequest{Sharing: []api.SharingMode{"", api.SharingTimeslice, api.SharingMPS}[r.IntN(3)]}
	for c := range 1 + r.IntN(2) {
		cr := api.ContainerRequest{Name: fmt.Sprint("c", c), Count: 1 + r.IntN(2)}
		if r.IntN(4) == 0 {
			cr.Whole = true
		} else {
			cr.Units, cr.MemoryBytes = int64(5*(1+r.IntN(20))), int64(1+r.IntN(8))*gib
		}
		req.Containers = append(req.Containers, cr)
	}
	return req
}

// TestSummaryNeverRulesOutAFit: through random reserves, outside
// assignments, releases and new table rows, every node's kept summary is
// the one computed afresh, and no request that fits a node is ruled out by
// its summary (Best passes over nodes by it).
func TestSummaryNeverRulesOutAFit(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 25))
	b := NewBooks(cfg())
	var names []string
	for i := range 12 {
		n := randomNode(r, fmt.Sprint("n", i))
		setNode(b, n)
		names = append(names, n.Name)
	}
	live := map[string]bool{}
	ruledOut, fits := 0, 0
	for step := range 1500 {
		switch op := r.IntN(10); {
		case op < 5:
			req, n := randomRequest2(r), names[r.IntN(len(names))]
			if a, err := b.Fit(n, req, t0); err == nil && b.Reserve(fmt.Sprint("p", step), a) == nil {
				live[fmt.Sprint("p", step)] = true
			}
		case op < 6: // an outside assignment, booked whether or not it fits
			n := names[r.IntN(len(names))]
			g := b.nodes[n].table.GPUs[r.IntN(len(b.nodes[n].table.GPUs))]
			a := &api.Assignment{Version: api.AssignmentVersion, Node: n, Containers: []api.ContainerAssignment{{Name: "c",
				GPUs: []api.GPUAssignment{{Index: g.Index, UUID: g.UUID, Units: int64(10 * (1 + r.IntN(5))), MemoryBytes: gib}}}}}
			b.Add(fmt.Sprint("o", step), a)
			live[fmt.Sprint("o", step)] = true
		case op < 9 && len(live) > 0:
			keys := make([]string, 0, len(live))
			for k := range live {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			k := keys[r.IntN(len(keys))]
			b.Release(k)
			delete(live, k)
		default: // the node's row changes (health, utilization, mode)
			n := names[r.IntN(len(names))]
			row := randomNode(r, n)
			row.GPUs = row.GPUs[:min(len(row.GPUs), len(b.nodes[n].table.GPUs))]
			for len(row.GPUs) < len(b.nodes[n].table.GPUs) {
				row.GPUs = append(row.GPUs, b.nodes[n].table.GPUs[len(row.GPUs)])
			}
			b.SetNode(row)
		}
		for _, n := range names {
			ns := b.nodes[n]
			kept := ns.sum
			b.summarize(ns)
			if kept != ns.sum {
				t.Fatalf("step %d: node %s kept summary %+v, afresh %+v", step, n, kept, ns.sum)
			}
			for range 4 {
				req := randomRequest2(r)
				fit := b.Check(n, req, t0) == nil
				if fit {
					fits++
				}
				if !ns.sum.mayFit(req) {
					ruledOut++
					if fit {
						t.Fatalf("step %d: %+v fits node %s but its summary %+v rules it out", step, req.Containers, n, ns.sum)
					}
				}
			}
		}
	}
	t.Logf("%d fits, %d ruled out by the summary", fits, ruledOut)
	if fits == 0 || ruledOut == 0 {
		t.Fatalf("the test never saw a fit (%d) or a ruling out (%d)", fits, ruledOut)
	}
}
