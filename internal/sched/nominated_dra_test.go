package sched

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
)

// TestDRARoomless: node n has two GPUs of 100 units and 16 GiB; gpu-0 holds
// 50 units and 8 GiB, gpu-1 is tainted (not counted): 50 units and 8 GiB
// free in all. Shares asking 50 units together fit by the sums (the
// allocator decides), 50+50 do not, nor 10 units with 9 GiB; a whole-device
// claim is never judged by sums.
func TestDRARoomless(t *testing.T) {
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	dev := func(name string) resourceapi.Device {
		return resourceapi.Device{Name: name, AllowMultipleAllocations: ptr.To(true),
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{capUnits: {Value: q(100)}, capMemory: {Value: q(16 << 30)}}}
	}
	tainted := dev("gpu-1")
	tainted.Taints = []resourceapi.DeviceTaint{{Key: "busy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	f := &fakeDRA{slices: []*resourceapi.ResourceSlice{{Spec: resourceapi.ResourceSliceSpec{Driver: testDriver, NodeName: ptr.To("n"),
		Pool: resourceapi.ResourcePool{Name: "n"}, Devices: []resourceapi.Device{dev("gpu-0"), tainted}}}}}
	held := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "held"}}
	held.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Driver: testDriver, Pool: "n", Device: "gpu-0", ShareID: ptr.To(types.UID("s")),
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{capUnits: q(50), capMemory: q(8 << 30)}}}}}
	f.claims = []*resourceapi.ResourceClaim{held}
	env := &draEnv{dra: f}
	claims := func(cs ...*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim { return cs }
	for _, c := range []struct {
		name   string
		claims []*resourceapi.ResourceClaim
		want   bool
	}{
		{"50 units", claims(shareClaim(50, 8)), false},
		{"25+25 units", claims(shareClaim(25, 4), shareClaim(25, 4)), false},
		{"50+50 units", claims(shareClaim(50, 1), shareClaim(50, 1)), true},
		{"9 GiB", claims(shareClaim(10, 9)), true},
		{"whole device", claims(shareClaim(0, 0), shareClaim(50, 1), shareClaim(50, 1)), false},
	} {
		v := &draFilterView{}
		if got := v.roomless(env, state(t, f), "n", c.claims); got != c.want {
			t.Errorf("%s: roomless %v, want %v", c.name, got, c.want)
		}
	}
}

// nominatedHandle is a framework handle whose nominator lists pods per node.
type nominatedHandle struct {
	fwk.Handle
	nominated map[string][]*corev1.Pod
}

func (h nominatedHandle) NominatedPodsForNode(node string) []fwk.PodInfo {
	var out []fwk.PodInfo
	for _, p := range h.nominated[node] {
		pi, err := framework.NewPodInfo(p)
		if err != nil {
			panic(err)
		}
		out = append(out, pi)
	}
	return out
}

// TestDRAHeldRefusal: node n's one GPU (100 units, 16 GiB) is free; pod
// hi (priority 1000, nominated to n, not bound) waits there for 50 units.
// A pod of 60 units sees n as a candidate, but the share there is held for
// hi: PreFilter refuses it saying so and naming hi, not that no device has
// the share free. Pods of other namespaces it is held for are counted, not
// named. With nobody nominated, n is handed over.
func TestDRAHeldRefusal(t *testing.T) {
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	f := &fakeDRA{slices: []*resourceapi.ResourceSlice{{Spec: resourceapi.ResourceSliceSpec{Driver: testDriver, NodeName: ptr.To("n"),
		Pool: resourceapi.ResourcePool{Name: "n"}, Devices: []resourceapi.Device{{Name: "gpu-0", AllowMultipleAllocations: ptr.To(true),
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{capUnits: {Value: q(100)}, capMemory: {Value: q(16 << 30)}}}}}}}}
	claimPod := func(ns, name string, units int64, nominated string) *corev1.Pod {
		c := shareClaim(units, 1)
		c.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("claim-" + ns + "-" + name)}
		f.claims = append(f.claims, c)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)}}
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "c", ResourceClaimName: ptr.To(name)}}
		p.Spec.Priority = ptr.To[int32](1000)
		p.Status.NominatedNodeName = nominated
		return p
	}
	hi := claimPod("ns", "hi", 50, "n")
	o1, o2 := claimPod("other", "o1", 50, "n"), claimPod("other", "o2", 10, "n")
	var five []*corev1.Pod // 10 units each
	for i := range 5 {
		five = append(five, claimPod("ns", fmt.Sprintf("h%d", i), 10, "n"))
	}
	pod := claimPod("ns", "p", 60, "")
	own := f.claims[len(f.claims)-1]
	ni := framework.NewNodeInfo()
	ni.SetNode(node)
	for _, c := range []struct {
		name      string
		nominated []*corev1.Pod
		refused   bool
		says, not []string // in the refusal, and not in it
	}{
		{"held for hi", []*corev1.Pod{hi}, true, []string{"ns/hi"}, []string{"namespace"}},
		{"held for hi and a pod of another namespace", []*corev1.Pod{hi, o2}, true,
			[]string{"ns/hi and 1 pod in another namespace"}, []string{"o2"}},
		{"held for pods of other namespaces", []*corev1.Pod{o1, o2}, true,
			[]string{"(2 pods in other namespaces)"}, []string{"o1", "o2", "ns/"}},
		{"held for five pods of ns and one of another", append(five, o2), true,
			[]string{"(ns/h0, ns/h1, ns/h2, 2 more and 1 pod in another namespace)"}, []string{"h3", "o2"}},
		{"nobody nominated", nil, false, nil, nil},
	} {
		p := &Plugin{candidates: 8, preempt: &preemptor{fh: nominatedHandle{nominated: map[string][]*corev1.Pod{"n": c.nominated}}, dra: &draEnv{dra: f}}}
		cyc := &cycle{dra: true, draFilter: &draFilterView{}, draState: state(t, f)}
		r, st := p.steeredUnheld(cyc, pod, []*resourceapi.ResourceClaim{own}, []fwk.NodeInfo{ni}, []string{"n"})
		if !c.refused {
			if !st.IsSuccess() || r == nil || !r.NodeNames.Has("n") {
				t.Errorf("%s: %v, %v; want n handed over", c.name, r, st)
			}
			continue
		}
		msg := st.Message()
		if st.Code() != fwk.Unschedulable || !strings.Contains(msg, "held for pods nominated there") || strings.Contains(msg, errNoShare.Error()) {
			t.Errorf("%s: refusal %v %q; want Unschedulable saying the share is held", c.name, st.Code(), msg)
		}
		for _, w := range c.says {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: refusal %q does not say %q", c.name, msg, w)
			}
		}
		for _, w := range c.not {
			if strings.Contains(msg, w) {
				t.Errorf("%s: refusal %q names %q", c.name, msg, w)
			}
		}
	}
}
