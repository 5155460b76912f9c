package sched

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// TestCheapest: nodes are ordered by fewest victims, then lowest highest
// priority, lowest sum, fewest nominated pods; equal ones keep the order
// given; at most k.
func TestCheapest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		costs []nodeCost
		k     int
		want  []string
	}{
		{"none", nil, 3, nil},
		{"fewest victims first", []nodeCost{{node: "a", victims: 2}, {node: "b", victims: 1}, {node: "c", victims: 3}}, 3, []string{"b", "a", "c"}},
		{"then lowest highest priority", []nodeCost{{node: "a", victims: 1, maxPrio: 5}, {node: "b", victims: 1, maxPrio: 0}}, 3, []string{"b", "a"}},
		{"then lowest sum", []nodeCost{{node: "a", victims: 2, maxPrio: 5, sumPrio: 10}, {node: "b", victims: 2, maxPrio: 5, sumPrio: 6}}, 3, []string{"b", "a"}},
		{"then fewest nominated", []nodeCost{{node: "a", victims: 1, nominated: 2}, {node: "b", victims: 1}}, 3, []string{"b", "a"}},
		{"ties keep the order given", []nodeCost{{node: "c", victims: 1}, {node: "a", victims: 1}, {node: "b", victims: 1}}, 2, []string{"c", "a"}},
	} {
		if got := cheapest(tc.costs, tc.k); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCostOn: the books' victims for a 50-unit priority-1000 pod on one GPU
// of 60, 20 and 20 units (priority 0), as budgets, terminating pods and
// nominated pods change them.
func TestCostOn(t *testing.T) {
	l, _, pods := onOneGPU(t, 60, 20, 20)
	hi := prioritized(gpuPod("hi", 50), 1000)
	req, err := api.ParseRequest(hi)
	if err != nil {
		t.Fatal(err)
	}
	none := func(*corev1.Pod) bool { return false }
	only := func(names ...string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool { return slices.Contains(names, p.Name) }
	}
	terminating := func(p *corev1.Pod) *corev1.Pod {
		c := p.DeepCopy()
		c.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		return c
	}
	nominated := prioritized(gpuPod("nom", 50), 1000)
	low := prioritized(gpuPod("low", 50), 0)
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		pods      []*corev1.Pod
		nominated []*corev1.Pod
		protected func(*corev1.Pod) bool
		want      int // victims; 0: preemption does not help
	}{
		{"one victim: the 60", hi, pods, nil, none, 1},
		{"the 60 protected: 40 not enough", hi, pods, nil, only("a"), 0},
		{"a 20 protected: the 60 still", hi, pods, nil, only("b"), 1},
		{"equal priority: none to evict", prioritized(gpuPod("eq", 50), 0), pods, nil, none, 0},
		{"the 60 terminating: room without victims", hi, []*corev1.Pod{terminating(pods[0]), pods[1], pods[2]}, nil, none, 0},
		{"the 60 terminating for a nominated 50: both 20s", hi, []*corev1.Pod{terminating(pods[0]), pods[1], pods[2]}, []*corev1.Pod{nominated}, none, 2},
		{"a lower-priority nominated pod holds nothing", hi, []*corev1.Pod{terminating(pods[0]), pods[1], pods[2]}, []*corev1.Pod{low}, none, 0},
	} {
		c, ok := costOn(l, tc.pod, req, nodeView{name: "n1", pods: tc.pods, nominated: tc.nominated}, tc.protected)
		got := 0
		if ok {
			got = c.victims
		}
		if got != tc.want {
			t.Errorf("%s: %d victims (%+v), want %d", tc.name, got, c, tc.want)
		}
	}
}

// TestProtectedBy: a budget of the pod's namespace selecting it and
// allowing no disruption protects it; one allowing disruptions, of another
// namespace, or selecting nothing does not.
func TestProtectedBy(t *testing.T) {
	pod := gpuPod("a", 10)
	pod.Labels = map[string]string{"app": "batch"}
	pdb := func(ns string, sel map[string]string, allowed int32) *policy.PodDisruptionBudget {
		return &policy.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"},
			Spec:   policy.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}},
			Status: policy.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
	}
	batch := map[string]string{"app": "batch"}
	for _, tc := range []struct {
		name string
		pdb  *policy.PodDisruptionBudget
		want bool
	}{
		{"selects, none allowed", pdb("ns", batch, 0), true},
		{"selects, one allowed", pdb("ns", batch, 1), false},
		{"other namespace", pdb("other", batch, 0), false},
		{"other label", pdb("ns", map[string]string{"app": "web"}, 0), false},
		{"empty selector", pdb("ns", nil, 0), false},
	} {
		if got := protectedBy([]*policy.PodDisruptionBudget{tc.pdb})(pod); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestShortlistedNodes: only the shortlisted nodes, in shortlist order,
// and of those only the ones m gives the code asked for.
func TestShortlistedNodes(t *testing.T) {
	m := framework.NewDefaultNodeToStatus()
	m.Set("a", fwk.NewStatus(fwk.Unschedulable))
	m.Set("b", fwk.NewStatus(fwk.UnschedulableAndUnresolvable))
	m.Set("c", fwk.NewStatus(fwk.Unschedulable))
	m.Set("d", fwk.NewStatus(fwk.Unschedulable))
	var nis []fwk.NodeInfo
	for _, n := range []string{"a", "b", "c", "d"} {
		nis = append(nis, nodeInfo(n))
	}
	s := shortlisted{NodeToStatusReader: m, nodes: []string{"c", "b", "a"}}
	got, err := s.NodesForStatusCode(listerOf(nis), fwk.Unschedulable)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ni := range got {
		names = append(names, ni.Node().Name)
	}
	if !slices.Equal(names, []string{"c", "a"}) {
		t.Fatalf("nodes %v, want [c a]", names)
	}
}

// nodeLister lists nodes by name (embedding the interface for the methods the
// shortlist does not call).
type nodeLister struct {
	fwk.NodeInfoLister
	nis []fwk.NodeInfo
}

func listerOf(nis []fwk.NodeInfo) nodeLister { return nodeLister{nis: nis} }

func (l nodeLister) List() ([]fwk.NodeInfo, error) { return l.nis, nil }

func (l nodeLister) Get(name string) (fwk.NodeInfo, error) {
	for _, ni := range l.nis {
		if ni.Node().Name == name {
			return ni, nil
		}
	}
	return nil, fmt.Errorf("node %q not found", name)
}

// countingAllocator counts the nodes the books cost.
type countingAllocator struct {
	*Books
	costed []string
}

func (c *countingAllocator) Victims(node string, req *api.PodRequest, o *alloc.Overlay, cands []alloc.Victim) ([]string, error) {
	c.costed = append(c.costed, node)
	return c.Books.Victims(node, req, o, cands)
}

// TestCheapestOfStopsEarly: nodes are costed in the order given until k of
// them cost one victim of the lowest priority with nobody nominated; a
// node needing two victims, or one with a nominated pod, does not count.
func TestCheapestOfStopsEarly(t *testing.T) {
	l, _ := newBooks(t)
	hi := prioritized(gpuPod("hi", 50), 1000)
	req, err := api.ParseRequest(hi)
	if err != nil {
		t.Fatal(err)
	}
	var views []nodeView
	for n, units := range [][]int64{{30, 30, 40}, {60, 40}, {60, 40}, {60, 40}, {60, 40}} {
		name := fmt.Sprintf("n%d", n)
		if err := setGPUNode(l, gpuNode(name, 1, t0)); err != nil {
			t.Fatal(err)
		}
		v := nodeView{name: name}
		for i, u := range units {
			p := gpuPod(fmt.Sprintf("%s-%d", name, i), u)
			r, _ := api.ParseRequest(p)
			if _, err := l.Reserve(string(p.UID), name, r); err != nil {
				t.Fatal(err)
			}
			v.pods = append(v.pods, p)
		}
		views = append(views, v)
	}
	views[1].nominated = []*corev1.Pod{prioritized(gpuPod("other", 10), 0)}
	c := &countingAllocator{Books: l}
	got := cheapestOf(c, hi, req, slices.Values(views), func(*corev1.Pod) bool { return false }, 2)
	if want := []string{"n2", "n3"}; !slices.Equal(got, want) {
		t.Errorf("shortlist %v, want %v", got, want)
	}
	if want := []string{"n0", "n1", "n2", "n3"}; !slices.Equal(c.costed, want) {
		t.Errorf("costed %v, want %v (stop after two unbeatable nodes)", c.costed, want)
	}
	// A pod of lower priority held on another node lowers the floor: a
	// victim of priority 0 may be beaten, so every node is costed.
	if err := setGPUNode(l, gpuNode("n9", 1, t0)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReserveWith("low", "n9", -1, req, nil); err != nil {
		t.Fatal(err)
	}
	c = &countingAllocator{Books: l}
	cheapestOf(c, hi, req, slices.Values(views), func(*corev1.Pod) bool { return false }, 2)
	if want := []string{"n0", "n1", "n2", "n3", "n4"}; !slices.Equal(c.costed, want) {
		t.Errorf("with a priority -1 pod booked: costed %v, want %v", c.costed, want)
	}
}
