package sched

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
	d := draStatuses{NodeToStatusReader: m}
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

// TestDRAStatusesAffinity: GPUSlice's PreFilter refusal stands for every
// node; preemption tries only those the pod's node selector admits.
func TestDRAStatusesAffinity(t *testing.T) {
	m := framework.NewDefaultNodeToStatus()
	refused := fwk.NewStatus(fwk.Unschedulable, errNoShare.Error()).WithPlugin(Name)
	m.SetAbsentNodesStatus(refused)
	mine, other := nodeInfo("mine"), nodeInfo("other")
	mine.Node().Labels = map[string]string{"group": "g"}
	l := listerOf([]fwk.NodeInfo{mine, other})
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"group": "g"}}}
	d := draStatuses{NodeToStatusReader: m, pod: pod, nodes: l}
	for code, want := range map[fwk.Code][]string{fwk.Unschedulable: {"mine"}, fwk.UnschedulableAndUnresolvable: {"other"}} {
		nis, err := d.NodesForStatusCode(l, code)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ni := range nis {
			got = append(got, ni.Node().Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%v: %v, want %v", code, got, want)
		}
	}
	if c := d.Get("other").Code(); c != fwk.UnschedulableAndUnresolvable {
		t.Errorf("other: %v, want UnschedulableAndUnresolvable", c)
	}
	if c := d.Get("mine").Code(); c != fwk.Unschedulable {
		t.Errorf("mine: %v, want Unschedulable", c)
	}
}
