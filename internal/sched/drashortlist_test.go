package sched

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
	"k8s.io/utils/ptr"
)

// snapshotHandle is nominatedHandle with the scheduler's snapshot of nodes.
type snapshotHandle struct {
	nominatedHandle
	nodes []fwk.NodeInfo
}

func (h snapshotHandle) SnapshotSharedLister() fwk.SharedLister {
	return nodeList{nodes: nodeInfos{nodes: h.nodes}}
}

type nodeList struct {
	fwk.SharedLister
	nodes nodeInfos
}

func (l nodeList) NodeInfos() fwk.NodeInfoLister { return l.nodes }

type nodeInfos struct {
	fwk.NodeInfoLister
	nodes []fwk.NodeInfo
}

func (l nodeInfos) List() ([]fwk.NodeInfo, error) { return l.nodes, nil }
func (l nodeInfos) Get(name string) (fwk.NodeInfo, error) {
	for _, ni := range l.nodes {
		if ni.Node().Name == name {
			return ni, nil
		}
	}
	return nil, fmt.Errorf("node %s not found", name)
}

// DeviceClasses: none (the shortlist runs no allocator).
func (f *fakeDRA) DeviceClasses() fwk.DeviceClassLister { return nil }

// countedStatuses gives every node Unschedulable and counts the nodes asked.
type countedStatuses struct {
	fwk.NodeToStatusReader
	asked map[string]bool
}

func (c countedStatuses) Get(node string) *fwk.Status {
	c.asked[node] = true
	return fwk.NewStatus(fwk.Unschedulable)
}

// fullDRANodes makes n nodes of one GPU (100 units, 16 GiB) each held by
// two priority-0 pods with a claim of 50 units; prio sets a pod's priority
// by name.
func fullDRANodes(n int, prio map[string]int32) ([]fwk.NodeInfo, *fakeDRA) {
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	f := &fakeDRA{}
	var nis []fwk.NodeInfo
	for i := range n {
		node := fmt.Sprintf("n%d", i)
		f.slices = append(f.slices, &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: testDriver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node}, Devices: []resourceapi.Device{{Name: "gpu-0", AllowMultipleAllocations: ptr.To(true),
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{capUnits: {Value: q(100)}, capMemory: {Value: q(16 << 30)}}}}}})
		ni := framework.NewNodeInfo()
		ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
		for j := range 2 {
			name := fmt.Sprintf("%s-p%d", node, j)
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)},
				Spec: corev1.PodSpec{NodeName: node, Priority: ptr.To(prio[name]),
					ResourceClaims: []corev1.PodResourceClaim{{Name: "c", ResourceClaimName: ptr.To(name)}}}}
			ni.AddPod(p)
			c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("claim-" + name)}}
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Driver: testDriver, Pool: node, Device: "gpu-0", ShareID: ptr.To(types.UID("s-" + name)),
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{capUnits: q(50), capMemory: q(1 << 30)}}}}}
			c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: p.UID}}
			f.claims = append(f.claims, c)
		}
		nis = append(nis, ni)
	}
	return nis, f
}

// TestDRAShortlistStops: 10 full nodes, each GPU held by two priority-0
// shares of 50 units; a 50-unit preemptor needs one victim anywhere. The
// shortlist stops once it holds three nodes nothing can beat (one victim
// of the lowest priority, nobody nominated there) instead of costing every
// node; with priority-5 pods on every node but n7 (whose pods are the
// floor, 0), it must reach n7 and put it first. A node with a preemptor
// nominated there is not one that ends the search, nor one the dry run
// may try alone (sure).
func TestDRAShortlistStops(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hi", UID: "hi"}, Spec: corev1.PodSpec{Priority: ptr.To[int32](1000)}}
	higher := map[string]int32{}
	for i := range 10 {
		if i != 7 {
			higher[fmt.Sprintf("n%d-p0", i)], higher[fmt.Sprintf("n%d-p1", i)] = 5, 5
		}
	}
	waiter := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "w"}, Spec: corev1.PodSpec{Priority: ptr.To[int32](1000)}}
	everyNominated := map[string][]*corev1.Pod{}
	for i := range 10 {
		everyNominated[fmt.Sprintf("n%d", i)] = []*corev1.Pod{waiter}
	}
	for _, c := range []struct {
		name      string
		prio      map[string]int32
		nominated map[string][]*corev1.Pod
		maxAsked  int
		first     string
		sure      bool
	}{
		{"all alike", nil, nil, 3, "", true},
		{"one node of the floor", higher, nil, 10, "n7", true},
		{"every node nominated", nil, everyNominated, 10, "", false},
	} {
		for _, byPods := range []bool{false, true} { // the claims read from the node's pods, or all of them
			nis, f := fullDRANodes(10, c.prio)
			pr := &preemptor{fh: snapshotHandle{nominatedHandle: nominatedHandle{nominated: c.nominated}, nodes: nis},
				ev: &preemption.Evaluator{}, dra: &draEnv{dra: f}}
			snap := &draSnapshot{}
			if byPods {
				snap.state = state(t, f)
			}
			cyc := &cycle{dra: true, draNeed: claimNeed{units: 50, bytes: 1 << 30}, draSnap: snap}
			m := countedStatuses{asked: map[string]bool{}}
			got, sure, err := pr.draShortlist(cyc, pod, m)
			if err != nil {
				t.Fatal(err)
			}
			if sure != c.sure {
				t.Errorf("%s (by pods %v): sure %v, want %v", c.name, byPods, sure, c.sure)
			}
			if len(got) != shortlistLen || len(m.asked) > c.maxAsked || len(m.asked) < shortlistLen {
				t.Errorf("%s (by pods %v): shortlist %v after %d nodes, want %d nodes after %d..%d", c.name, byPods, got, len(m.asked), shortlistLen, shortlistLen, c.maxAsked)
			}
			if c.first != "" && (len(got) == 0 || got[0] != c.first) {
				t.Errorf("%s (by pods %v): shortlist %v, want %s first", c.name, byPods, got, c.first)
			}
		}
	}
}

// TestShortlistTries: a shortlist whose first node nothing can beat is
// dry-run on that node alone first, then on the rest; otherwise on all
// its nodes at once.
func TestShortlistTries(t *testing.T) {
	for _, c := range []struct {
		nodes []string
		sure  bool
		want  [][]string
	}{
		{nil, true, nil},
		{[]string{"a"}, true, [][]string{{"a"}}},
		{[]string{"a", "b", "c"}, true, [][]string{{"a"}, {"b", "c"}}},
		{[]string{"a", "b", "c"}, false, [][]string{{"a", "b", "c"}}},
	} {
		if got := shortlistTries(c.nodes, c.sure); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("shortlistTries(%v, %v) = %v, want %v", c.nodes, c.sure, got, c.want)
		}
	}
}

// TestSkipOwnFilters: a dry run's node state skips the DynamicResources
// plugins (stock and wrapped) and GPUSlice besides what it skipped, and the
// state it was cloned from (which shares the skip set) still runs them.
func TestSkipOwnFilters(t *testing.T) {
	orig := framework.NewCycleState()
	orig.SetSkipFilterPlugins(sets.New("VolumeBinding"))
	node := orig.Clone()
	skipOwnFilters(node)
	if got, want := sets.List(node.GetSkipFilterPlugins()), []string{"DynamicResources", Name, DRAName, "VolumeBinding"}; !slices.Equal(got, want) {
		t.Errorf("node state skips %v, want %v", got, want)
	}
	if got := sets.List(orig.GetSkipFilterPlugins()); !slices.Equal(got, []string{"VolumeBinding"}) {
		t.Errorf("the original state skips %v, want [VolumeBinding]", got)
	}
	empty := framework.NewCycleState()
	skipOwnFilters(empty)
	if got := empty.GetSkipFilterPlugins().Len(); got != 3 {
		t.Errorf("a state with no skip set skips %d plugins, want 3", got)
	}
}

// TestDRAFloor: the lowest priority of the pods with claims, below the
// preemptor's, as the nodes change between preemptors (each node's kept
// while its NodeInfo's generation stands, read again once it moves).
func TestDRAFloor(t *testing.T) {
	pr := &preemptor{}
	nis, _ := fullDRANodes(4, map[string]int32{"n0-p0": 7, "n0-p1": 7, "n1-p0": 3, "n1-p1": 9, "n2-p0": 5, "n2-p1": 5, "n3-p0": 4, "n3-p1": 4})
	if got := pr.draFloor(nis, 1000); got != 3 {
		t.Errorf("floor %d, want 3", got)
	}
	if got := pr.draFloor(nis, 2); got != 2 {
		t.Errorf("floor below a preemptor of priority 2: %d, want 2", got)
	}
	// n1's pods go; a pod without claims of priority -9 and one with claims of 1 come to n3.
	n1 := framework.NewNodeInfo()
	n1.SetNode(nis[1].Node())
	n3 := nis[3].Snapshot().(*framework.NodeInfo)
	n3.AddPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain", UID: "plain"}, Spec: corev1.PodSpec{Priority: ptr.To[int32](-9)}})
	n3.AddPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "low", UID: "low"}, Spec: corev1.PodSpec{Priority: ptr.To[int32](1),
		ResourceClaims: []corev1.PodResourceClaim{{Name: "c", ResourceClaimName: ptr.To("low")}}}})
	nis[1], nis[3] = n1, n3
	if got := pr.draFloor(nis, 1000); got != 1 {
		t.Errorf("floor after the nodes changed: %d, want 1", got)
	}
	nis[3] = framework.NewNodeInfo()
	nis[3].SetNode(n3.Node())
	if got := pr.draFloor(nis, 1000); got != 5 {
		t.Errorf("floor after n3 emptied: %d, want 5 (n2's; n0's 7, n1 and n3 empty)", got)
	}
}

// TestSlicesByNode: the slices by node of a list, made again for a list
// of other objects, not for one of the same objects in any order.
func TestSlicesByNode(t *testing.T) {
	_, f := fullDRANodes(3, nil)
	var b slicesByNode
	first := b.of(f.slices)
	if len(first) != 3 || first["n1"][0] != f.slices[1] {
		t.Fatalf("by node: %v", first)
	}
	again := slices.Clone(f.slices)
	slices.Reverse(again)
	if got := b.of(again); fmt.Sprintf("%p", got) != fmt.Sprintf("%p", first) {
		t.Errorf("the same objects listed again, in another order: made again")
	}
	changed := slices.Clone(f.slices)
	n1 := *changed[1]
	n1.Spec.Devices = nil
	changed[1] = &n1
	if got := b.of(changed); got["n1"][0] != &n1 || got["n0"][0] != f.slices[0] {
		t.Errorf("a slice replaced: by node %v", got)
	}
	if got := b.of(f.slices[:2]); len(got) != 2 {
		t.Errorf("a slice gone: by node %v", got)
	}
}
