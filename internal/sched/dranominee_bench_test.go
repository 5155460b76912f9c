package sched

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
)

// fullCluster is nodes nodes of 8 GPUs, each GPU holding two shares (a
// claim each, of a pod on the node), in kube-scheduler's claim tracker:
// the cluster a burst of preemptors meets (make bench-scheduler's DRA
// preemption phase, at its scale).
func fullCluster(b *testing.B, nodes int) (fwk.SharedDRAManager, cache.Indexer, []*resourceapi.ResourceSlice, fwk.NodeInfo) {
	b.Helper()
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	var objs []runtime.Object
	var slices []*resourceapi.ResourceSlice
	var pods0 []*corev1.Pod
	for n := range nodes {
		node := fmt.Sprintf("n%05d", n)
		var devs []resourceapi.Device
		for g := range 8 {
			devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", g), AllowMultipleAllocations: ptr.To(true),
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{capUnits: {Value: q(100)}, capMemory: {Value: q(16 << 30)}}})
			for s := range 2 {
				name := fmt.Sprintf("%s-%d-%d", node, g, s)
				c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name), ResourceVersion: "1"}}
				c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
					Driver: testDriver, Pool: node, Device: fmt.Sprintf("gpu-%d", g), ShareID: ptr.To(types.UID("s-" + name)),
					ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{capUnits: q(50), capMemory: q(8 << 30)}}}}}
				objs = append(objs, c)
				if n == 0 {
					pods0 = append(pods0, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("p-" + name)},
						Spec: corev1.PodSpec{NodeName: node, ResourceClaims: []corev1.PodResourceClaim{{Name: "r", ResourceClaimName: ptr.To(name)}}}})
				}
			}
		}
		slices = append(slices, &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: testDriver,
			NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node}, Devices: devs}})
	}
	m, byPool := startTracker(b, objs)
	ni := framework.NewNodeInfo(pods0...)
	ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n00000"}})
	return m, byPool, slices, ni
}

// BenchmarkNomineeState: a nominated pod's state read for its node's pools
// alone (nomineeState) against the claim tracker's whole state
// (GatherAllocatedState), side by side on the same full cluster of 100 and
// 1,000 nodes (make bench-dra-state; docs/benchmarks.md).
func BenchmarkNomineeState(b *testing.B) {
	for _, nodes := range []int{100, 1000} {
		m, byPool, slices, ni := fullCluster(b, nodes)
		env := &draEnv{dra: m, features: structured.Features{ConsumableCapacity: true}}
		for _, read := range []struct {
			name  string
			index cache.Indexer
		}{{"node-listed", nil}, {"node-indexed", byPool}} {
			b.Run(fmt.Sprintf("nodes=%d/%s", nodes, read.name), func(b *testing.B) {
				b.ReportAllocs()
				env := &draEnv{dra: m, features: env.features, byPool: read.index}
				for b.Loop() {
					if !env.nomineeState(ni, slices, emptyState()) {
						b.Fatal("not read")
					}
				}
			})
		}
		b.Run(fmt.Sprintf("nodes=%d/gathered", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := env.allocatedState(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFirstTry: a pod's first try in a full cluster (no device with
// its share free), its candidates told by the ledger (draledger.go; its
// pools read once, before the loop, as between the cycles of a burst)
// against the claim tracker's whole state gathered and ranked
// (candidatesIn), side by side on the same cluster of 100 and 1,000 nodes
// (make bench-dra-state; docs/benchmarks.md).
func BenchmarkFirstTry(b *testing.B) {
	need := claimNeed{units: 50, bytes: 8 << 30}
	for _, nodes := range []int{100, 1000} {
		m, byPool, slices, ni0 := fullCluster(b, nodes)
		nis := []fwk.NodeInfo{ni0}
		for n := 1; n < nodes; n++ {
			ni := framework.NewNodeInfo()
			ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%05d", n)}})
			nis = append(nis, ni)
		}
		env := &draEnv{dra: m, features: structured.Features{ConsumableCapacity: true}, byPool: byPool, changes: newClaimChanges()}
		pod := &corev1.Pod{}
		if names, _, ok := env.ledgerCandidates(pod, nis, slices, emptyState(), nil, need, "binpack", 4); !ok || len(names) > 0 {
			b.Fatalf("ledger: %v, told %v; want none, told", names, ok)
		}
		b.Run(fmt.Sprintf("nodes=%d/ledger", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if names, _, ok := env.ledgerCandidates(pod, nis, slices, emptyState(), nil, need, "binpack", 4); !ok || len(names) > 0 {
					b.Fatalf("ledger: %v, told %v", names, ok)
				}
			}
		})
		b.Run(fmt.Sprintf("nodes=%d/gathered", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st, err := env.allocatedState()
				if err != nil {
					b.Fatal(err)
				}
				if names, _ := env.candidatesIn(pod, nis, slices, st, nil, need, "binpack", 4, true); len(names) > 0 {
					b.Fatalf("gathered: %v", names)
				}
			}
		})
	}
}
