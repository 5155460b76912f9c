package sched

import (
	"slices"
	"testing"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
)

// TestDRAStatuses: a node DynamicResources rejects for lack of devices is
// one preemption may help (Unschedulable); one whose claim is allocated
// elsewhere, or another plugin's final rejection, stays unresolvable.
func TestDRAStatuses(t *testing.T) {
	m := framework.NewDefaultNodeToStatus()
	m.Set("full", fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "cannot allocate all claims").WithPlugin(names.DynamicResources))
	m.Set("elsewhere", fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "resourceclaim not available on the node").WithPlugin(names.DynamicResources))
	m.Set("selector", fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) didn't match").WithPlugin(names.NodeAffinity))
	m.Set("cpu", fwk.NewStatus(fwk.Unschedulable, "Insufficient cpu").WithPlugin(names.NodeResourcesFit))
	l := listerOf([]fwk.NodeInfo{nodeInfo("full"), nodeInfo("elsewhere"), nodeInfo("selector"), nodeInfo("cpu")})
	d := draStatuses{m}
	list := func(code fwk.Code) []string {
		nis, err := d.NodesForStatusCode(l, code)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ni := range nis {
			out = append(out, ni.Node().Name)
		}
		slices.Sort(out)
		return out
	}
	if got := list(fwk.Unschedulable); !slices.Equal(got, []string{"cpu", "full"}) {
		t.Fatalf("Unschedulable: %v, want [cpu full]", got)
	}
	if got := list(fwk.UnschedulableAndUnresolvable); !slices.Equal(got, []string{"elsewhere", "selector"}) {
		t.Fatalf("UnschedulableAndUnresolvable: %v, want [elsewhere selector]", got)
	}
	if c := d.Get("full").Code(); c != fwk.Unschedulable {
		t.Fatalf("full: %v", c)
	}
	if c := d.Get("elsewhere").Code(); c != fwk.UnschedulableAndUnresolvable {
		t.Fatalf("elsewhere: %v", c)
	}
}
