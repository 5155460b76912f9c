package sched

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// Get is the claim of that name (pendingClaims reads the pod's claims).
func (f fakeClaims) Get(ns, name string) (*resourceapi.ResourceClaim, error) {
	for _, c := range f.c {
		if c.Namespace == ns && c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("claim %s/%s not found", ns, name)
}

// DeviceClassResolver: no extended resources are mapped to DeviceClasses.
func (f *fakeDRA) DeviceClassResolver() fwk.DeviceClassResolver { return nil }

// TestDeviceViewOtherDriver: another driver's slice whose devices have
// capacities named units and memory (and a GPU the books measure busy by
// its uuid) is listed as published: neither reordered nor cut.
func TestDeviceViewOtherDriver(t *testing.T) {
	f := steerFixture()
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	dev := func(name string) resourceapi.Device {
		return resourceapi.Device{Name: name, AllowMultipleAllocations: ptr.To(true),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": {StringValue: ptr.To("X-" + name)}},
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{capUnits: {Value: q(100)}, capMemory: {Value: q(100)}}}
	}
	other := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: "other.example.com", NodeName: ptr.To("n0"),
		Pool: resourceapi.ResourcePool{Name: "x"}, Devices: []resourceapi.Device{dev("x-0"), dev("x-1")}}}
	f.slices = append(f.slices, other)
	held := &resourceapi.ResourceClaim{}
	held.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Driver: "other.example.com", Pool: "x", Device: "x-1", ShareID: ptr.To(types.UID("s")),
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{capUnits: q(50), capMemory: q(50)}}}}}
	f.claims = append(f.claims, held)
	s := &steer{}
	got := s.view(f.slices, &steerCycle{policy: api.PlacementBinpack, busy: map[string]bool{"X-x-0": true}}, state(t, f), len(f.slices))
	if got[2] != other {
		t.Errorf("another driver's slice changed: devices %v, want it as published %v", deviceNames(got[2]), deviceNames(other))
	}
}

// TestDeviceViewBusyClaims: n0's gpu-1 is measured at 99 % (threshold 95).
// A pod whose claim is a plain share is not shown it; one whose preemption
// freed gpu-1 (its victims' claims were there: their work was measured) is,
// but not one nominated to n0 whose victims freed gpu-2 (the node's other
// busy GPUs stay hidden); one nominated to n0 with no GPUs recorded (a
// restarted scheduler, a later preemption that found no node) is shown
// n0's busy GPUs, which of them its victims freed not known, one
// nominated elsewhere is not; so are pods with a claim the view's hiding
// would refuse a device it may have: admin access, a device chosen by a
// CEL selector.
func TestDeviceViewBusyClaims(t *testing.T) {
	b, _ := newBooks(t)
	row := gpuNode("n0", 4, t0)
	for i := range row.Status.GPUs {
		row.Status.GPUs[i].UUID = fmt.Sprintf("GPU-n0-gpu-%d", i)
	}
	row.Status.GPUs[1].UtilizationPercent = 99
	if err := setGPUNode(b, row); err != nil {
		t.Fatal(err)
	}
	claim := func(name string, mut func(*resourceapi.ExactDeviceRequest)) *resourceapi.ResourceClaim {
		c := shareClaim(10, 1)
		c.ObjectMeta = metav1.ObjectMeta{Namespace: "ns", Name: name}
		if mut != nil {
			mut(c.Spec.Devices.Requests[0].Exactly)
		}
		return c
	}
	pod := func(claim, nominated string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: claim, UID: "pod-" + types.UID(claim)}}
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "c", ResourceClaimName: ptr.To(claim)}}
		p.Status.NominatedNodeName = nominated
		return p
	}
	f := steerFixture()
	f.claims = append(f.claims, claim("share", nil),
		claim("admin", func(r *resourceapi.ExactDeviceRequest) { r.AdminAccess = ptr.To(true) }),
		claim("cel", func(r *resourceapi.ExactDeviceRequest) {
			r.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["gpuslice.io"].index == 1`}}}
		}))
	s := &steer{}
	m := steeredManager{SharedDRAManager: f, s: s}
	for _, c := range []struct {
		name, claim, nominated string
		freed                  []string // the GPUs its preemption's victims freed
		cleared                bool     // by a later preemption that found no node (its nomination stays)
		seesBusy               bool
	}{
		{"plain share", "share", "", nil, false, false},
		{"plain share whose victims freed gpu-1", "share", "n0", []string{"GPU-n0-gpu-1"}, false, true},
		{"plain share whose victims freed gpu-2", "share", "n0", []string{"GPU-n0-gpu-2"}, false, false},
		{"plain share nominated to n0, no victims recorded", "share", "n0", nil, false, true},
		{"plain share nominated to n0, its record of gpu-2 cleared", "share", "n0", []string{"GPU-n0-gpu-2"}, true, true},
		{"plain share nominated elsewhere", "share", "n1", nil, false, false},
		{"admin access", "admin", "", nil, false, true},
		{"CEL selector", "cel", "", nil, false, true},
	} {
		rec := newPreempted(time.Minute)
		p := pod(c.claim, c.nominated)
		if c.freed != nil {
			rec.choseGPUs(p.UID, c.nominated, c.freed)
			rec.chose(p.UID, c.nominated, []string{"victim"})
			rec.commit(p.UID, c.nominated, time.Now())
		}
		if c.cleared {
			rec.commit(p.UID, "", time.Now())
		}
		s.plugin.Store(&Plugin{preempt: &preemptor{dra: &draEnv{dra: f}, rec: rec}})
		cyc := s.cycle(framework.NewCycleState(), b, p, nil)
		s.cur.Store(cyc)
		if _, err := m.ResourceClaims().GatherAllocatedState(); err != nil {
			t.Fatal(err)
		}
		got, err := m.ResourceSlices().ListWithDeviceTaintRules()
		s.cur.Store(nil)
		if err != nil {
			t.Fatal(err)
		}
		if sees := slices.Contains(deviceNames(got[0]), "gpu-1"); sees != c.seesBusy {
			t.Errorf("%s: n0's devices %v: busy gpu-1 shown %v, want %v", c.name, deviceNames(got[0]), sees, c.seesBusy)
		}
	}
}

// TestDRAVictimsBusyDevice: gpu-0 is free but measured busy, gpu-1 holds
// the candidate v (60 units). A 50-unit share is not found to fit with no
// victims on gpu-0 (the view would not let the pod onto it): v is chosen.
// A busy device a candidate holds stays a place to free; with no
// candidate, nothing frees a device the pod may have.
func TestDRAVictimsBusyDevice(t *testing.T) {
	for _, c := range []struct {
		name  string
		busy  []string
		cands []alloc.Victim
		want  []string // nil with err: ErrNoVictims
		err   bool
	}{
		{"free gpu-0 busy", []string{"U-0"}, victims(nil, "v"), []string{"v"}, false},
		{"both busy", []string{"U-0", "U-1"}, victims(nil, "v"), []string{"v"}, false},
		{"none busy", nil, victims(nil, "v"), nil, false},
		{"free gpu-0 busy, no candidate", []string{"U-0"}, nil, nil, true},
	} {
		n := testDRANode(t, 2, []heldClaim{{pods: []string{"v"}, dev: 1, units: 60, gib: 1}})
		for i := range n.slices[0].Spec.Devices {
			d := &n.slices[0].Spec.Devices[i]
			d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": {StringValue: ptr.To(fmt.Sprintf("U-%d", i))}}
		}
		busy := map[string]bool{}
		for _, u := range c.busy {
			busy[u] = true
		}
		n.withoutBusy(busy, sets.New[types.UID](), c.cands)
		got, err := n.draVictims(context.Background(), []*resourceapi.ResourceClaim{shareClaim(50, 1)}, sets.New[types.UID](), c.cands)
		switch {
		case c.err && !errors.Is(err, alloc.ErrNoVictims):
			t.Errorf("%s: victims %v, err %v, want ErrNoVictims", c.name, got, err)
		case !c.err && (err != nil || !slices.Equal(got, c.want)):
			t.Errorf("%s: victims %v, err %v, want %v", c.name, got, err, c.want)
		}
	}
}

// TestDeviceViewNarrowsFirst: the view computes a share pod's candidate
// nodes only when its PreFilter runs before GPUSlice's (the profile's
// order); after it, GPUSlice chose them already and the view shows every
// node's slices.
func TestDeviceViewNarrowsFirst(t *testing.T) {
	b, _ := newBooks(t)
	f := steerFixture()
	share := shareClaim(10, 1)
	share.ObjectMeta = metav1.ObjectMeta{Namespace: "ns", Name: "share"}
	f.claims = append(f.claims, share)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "p"}}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "c", ResourceClaimName: ptr.To("share")}}
	s := &steer{}
	s.plugin.Store(&Plugin{preempt: &preemptor{dra: &draEnv{dra: f}}, wait: &waiters{}, candidates: 8})
	if c := s.cycle(framework.NewCycleState(), b, p, nil); c.narrow == nil {
		t.Error("DRAName's PreFilter first: the view does not narrow")
	}
	after := framework.NewCycleState()
	after.Write(stateKey, &cycle{dra: true})
	if c := s.cycle(after, b, p, nil); c.narrow != nil {
		t.Error("after GPUSlice's PreFilter: the view narrows again")
	}
}

// TestDRAFreedGPUs: the GPUs a preemption records as freed by its victims
// (shown to the preemptor though measured busy) are those of the claims
// evicting them deallocates: v's own claim on gpu-1, not gpu-0, whose
// claim v shares with x (it stays), nor w's gpu-2; with x evicted too,
// gpu-0 as well.
func TestDRAFreedGPUs(t *testing.T) {
	n := testDRANode(t, 3, []heldClaim{{pods: []string{"v", "x"}, dev: 0, units: 20, gib: 1},
		{pods: []string{"v"}, dev: 1, units: 60, gib: 1}, {pods: []string{"w"}, dev: 2, units: 50, gib: 1}})
	for i := range n.slices[0].Spec.Devices {
		d := &n.slices[0].Spec.Devices[i]
		d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": {StringValue: ptr.To(fmt.Sprintf("U-%d", i))}}
		n.devices[structured.MakeDeviceID(testDriver, "n", d.Name)] = *d
	}
	for _, c := range []struct {
		victims []types.UID
		want    []string
	}{
		{[]types.UID{"v"}, []string{"U-1"}},
		{[]types.UID{"v", "x"}, []string{"U-0", "U-1"}},
		{[]types.UID{"x"}, nil},
	} {
		got := n.freedGPUs(sets.New(c.victims...))
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("victims %v: freed GPUs %v, want %v", c.victims, got, c.want)
		}
	}
}
