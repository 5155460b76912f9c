package sched

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
	"k8s.io/utils/ptr"
)

const otherDriver = "other.example.com"

// nomineeWorld is a cluster of four nodes (n0..n3) with a gpuslice slice
// each (pool named by the node, gpu-0..gpu-3) and on n1 and n3 a second
// pool of another driver (dedicated devices), its claims allocated at
// random (shares, whole devices, admin access), some reserved by pods on
// their node and some by nobody, and the claim tracker kube-scheduler runs
// (its assume cache and allocated devices) on them.
type nomineeWorld struct {
	slices  []*resourceapi.ResourceSlice
	claims  []*resourceapi.ResourceClaim
	pods    map[string][]*corev1.Pod // by node
	tracker fwk.ResourceClaimTracker
	m       fwk.SharedDRAManager
	byPool  cache.Indexer // the claim informer's, by allocated pool
}

func newNomineeWorld(t *testing.T, rng *rand.Rand) *nomineeWorld {
	t.Helper()
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	w := &nomineeWorld{pods: map[string][]*corev1.Pod{}}
	for i := range 4 {
		node := fmt.Sprintf("n%d", i)
		var devs []resourceapi.Device
		for g := range 4 {
			devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", g), AllowMultipleAllocations: ptr.To(true),
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{capUnits: {Value: q(100)}, capMemory: {Value: q(100)}}})
		}
		w.slices = append(w.slices, &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: testDriver,
			NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node}, Devices: devs}})
		if i%2 == 1 {
			w.slices = append(w.slices, &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: otherDriver,
				NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node + "-x"}, Devices: []resourceapi.Device{{Name: "x-0"}, {Name: "x-1"}}}})
		}
	}
	for k := range 40 {
		node := fmt.Sprintf("n%d", rng.IntN(4))
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("c%d", k), UID: types.UID(fmt.Sprintf("uid-%d", k)), ResourceVersion: "1"}}
		var r resourceapi.DeviceRequestAllocationResult
		switch x := rng.IntN(10); {
		case x < 6:
			r = resourceapi.DeviceRequestAllocationResult{Driver: testDriver, Pool: node, Device: fmt.Sprintf("gpu-%d", rng.IntN(4)),
				ShareID:          ptr.To(types.UID(fmt.Sprintf("share-%d", k))),
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{capUnits: q(int64(1 + rng.IntN(20))), capMemory: q(int64(1 + rng.IntN(20)))}}
		case x < 8 && node[1]%2 == 1:
			r = resourceapi.DeviceRequestAllocationResult{Driver: otherDriver, Pool: node + "-x", Device: fmt.Sprintf("x-%d", k%2)}
		case x < 9:
			r = resourceapi.DeviceRequestAllocationResult{Driver: testDriver, Pool: node, Device: "gpu-0", AdminAccess: ptr.To(true)}
		default: // (left for the in-flight allocations below)
		}
		if r.Driver != "" {
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{r}}}
		}
		w.claims = append(w.claims, c)
		if rng.IntN(4) > 0 { // (else reserved by nobody: held on the node all the same)
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-" + c.Name, UID: types.UID("pod-" + c.Name)},
				Spec: corev1.PodSpec{NodeName: node, ResourceClaims: []corev1.PodResourceClaim{{Name: "r", ResourceClaimName: ptr.To(c.Name)}}}}
			w.pods[node] = append(w.pods[node], p)
		}
	}
	w.start(t)
	return w
}

// start runs the stock claim tracker on w's claims and waits until it holds them all.
func (w *nomineeWorld) start(t *testing.T) {
	t.Helper()
	objs := make([]runtime.Object, 0, len(w.claims))
	for _, c := range w.claims {
		objs = append(objs, c)
	}
	w.m, w.byPool = startTracker(t, objs)
	w.tracker = w.m.ResourceClaims()
}

// startTracker runs kube-scheduler's claim tracker (its assume cache and
// allocated devices, on a claim informer with claimPoolIndex) on claims,
// until the test ends, and waits until it holds them all and its
// allocated devices (filled by the assume cache's events, after its
// store) hold every allocation it lists.
func startTracker(tb testing.TB, claims []runtime.Object) (fwk.SharedDRAManager, cache.Indexer) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	inf := informers.NewSharedInformerFactory(fake.NewClientset(claims...), 0)
	claimInf := inf.Resource().V1().ResourceClaims().Informer()
	m := dynamicresources.NewDRAManager(ctx, assumecache.NewAssumeCache(klog.Background(), claimInf, "ResourceClaim", "", nil), nil, inf)
	byPool := indexClaimPools(claimInf)
	if byPool == nil {
		tb.Fatal("claims not indexed by pool")
	}
	inf.Start(ctx.Done())
	inf.WaitForCacheSync(ctx.Done())
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		l, _ := m.ResourceClaims().List()
		st, err := m.ResourceClaims().GatherAllocatedState()
		if len(l) == len(claims) && err == nil && sameState(st, listedState(l)) == nil {
			return m, byPool
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the tracker holds %d of %d claims, its allocated devices all of them: %v", len(l), len(claims), err == nil && sameState(st, listedState(l)) == nil)
		}
	}
}

// listedState is the allocated state of claims on any pool.
func listedState(claims []*resourceapi.ResourceClaim) *structured.AllocatedState {
	st := emptyState()
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		var pools poolSet
		for _, r := range c.Status.Allocation.Devices.Results {
			pools = append(pools, poolID{r.Driver, r.Pool})
		}
		addAllocation(st, c.Status.Allocation, pools)
	}
	return st
}

// gatheredOn is the tracker's whole gathered state on the pools of node's slices.
func (w *nomineeWorld) gatheredOn(t *testing.T, node string) *structured.AllocatedState {
	t.Helper()
	full, err := (&draEnv{dra: w.m}).allocatedState()
	if err != nil {
		t.Fatal(err)
	}
	return w.restrict(full, node)
}

// restrict is st on the pools of node's slices alone.
func (w *nomineeWorld) restrict(full *structured.AllocatedState, node string) *structured.AllocatedState {
	pools := map[poolID]bool{}
	for _, sl := range w.slices {
		if sl.Spec.NodeName != nil && *sl.Spec.NodeName == node {
			pools[poolID{sl.Spec.Driver, sl.Spec.Pool.Name}] = true
		}
	}
	out := emptyState()
	on := func(id structured.DeviceID) bool { return pools[poolID{id.Driver.String(), id.Pool.String()}] }
	for id := range full.AllocatedDevices {
		if on(id) {
			out.AllocatedDevices.Insert(id)
		}
	}
	for id := range full.AllocatedSharedDeviceIDs {
		if on(id.GetDeviceID()) {
			out.AllocatedSharedDeviceIDs.Insert(id)
		}
	}
	for id, c := range full.AggregatedCapacity {
		if on(id) {
			out.AggregatedCapacity[id] = c
		}
	}
	return out
}

func (w *nomineeWorld) nodeInfo(node string) fwk.NodeInfo {
	ni := framework.NewNodeInfo(w.pods[node]...)
	ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	return ni
}

// sameState compares two states' devices, shares and consumed capacity.
func sameState(a, b *structured.AllocatedState) error {
	if !a.AllocatedDevices.Equal(b.AllocatedDevices) {
		return fmt.Errorf("devices %v, want %v", a.AllocatedDevices.UnsortedList(), b.AllocatedDevices.UnsortedList())
	}
	if !a.AllocatedSharedDeviceIDs.Equal(b.AllocatedSharedDeviceIDs) {
		return fmt.Errorf("shares %v, want %v", a.AllocatedSharedDeviceIDs.UnsortedList(), b.AllocatedSharedDeviceIDs.UnsortedList())
	}
	if len(a.AggregatedCapacity) != len(b.AggregatedCapacity) {
		return fmt.Errorf("capacity of %d devices, want %d", len(a.AggregatedCapacity), len(b.AggregatedCapacity))
	}
	for id, ca := range a.AggregatedCapacity {
		cb, ok := b.AggregatedCapacity[id]
		if !ok || len(ca) != len(cb) {
			return fmt.Errorf("device %v: capacity %v, want %v", id, ca, cb)
		}
		for n, qa := range ca {
			if qb, ok := cb[n]; !ok || qa.Cmp(*qb) != 0 {
				return fmt.Errorf("device %v: %s %v, want %v", id, n, qa, qb)
			}
		}
	}
	return nil
}

// TestNomineeStateIsGathered: for each node of random worlds, the state
// read for the node's pools alone equals the stock tracker's gathered
// state on them: its cache's claims (pods' and no pod's), admin access
// holding nothing, and allocations in flight for the node's pods (one
// also in the cache counted twice, as the tracker does), after
// allocations in flight were signalled and one of them written and
// assumed.
func TestNomineeStateIsGathered(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 32))
		w := newNomineeWorld(t, rng)
		w.inFlight(t, 7) // (draledger_test.go)
		for i := range 4 {
			node := fmt.Sprintf("n%d", i)
			for _, byPool := range []cache.Indexer{nil, w.byPool} { // every claim listed; the pool index
				got := emptyState()
				env := &draEnv{dra: w.m, features: structured.Features{ConsumableCapacity: true}, byPool: byPool}
				if !env.nomineeState(w.nodeInfo(node), w.slices, got) {
					t.Fatalf("seed %d, %s: not read", seed, node)
				}
				if err := sameState(got, w.gatheredOn(t, node)); err != nil {
					t.Errorf("seed %d, %s, indexed %v: %v", seed, node, byPool != nil, err)
				}
			}
		}
	}
}

// noNodeSlice is a slice of no node (another driver's network device, all
// nodes').
func noNodeSlice() *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: otherDriver, AllNodes: ptr.To(true),
		Pool: resourceapi.ResourcePool{Name: "net"}, Devices: []resourceapi.Device{{Name: "nic"}}}}
}

// TestNomineeStateRefuses: where the node's state alone is not what the
// allocator would read, nomineeState says so.
func TestNomineeStateRefuses(t *testing.T) {
	w := newNomineeWorld(t, rand.New(rand.NewPCG(1, 2)))
	on := structured.Features{ConsumableCapacity: true}
	netSlice := noNodeSlice()
	for _, c := range []struct {
		name   string
		fts    structured.Features
		node   string
		slices []*resourceapi.ResourceSlice
	}{
		{"consumable capacity off", structured.Features{}, "n1", w.slices},
		{"a slice of no node", on, "n1", append([]*resourceapi.ResourceSlice{netSlice}, w.slices...)},
		{"a node without slices", on, "n9", w.slices},
	} {
		env := &draEnv{dra: w.m, features: c.fts}
		if env.nomineeState(w.nodeInfo(c.node), c.slices, emptyState()) {
			t.Errorf("%s: read", c.name)
		}
	}
}

// worldDRA is w's claim tracker with its slices.
type worldDRA struct {
	fwk.SharedDRAManager
	slices []*resourceapi.ResourceSlice
}

func (d worldDRA) ResourceSlices() fwk.ResourceSliceLister { return fakeSlices{d.slices} }

// TestNomineeView: a nominated pod's PreFilter hands the DynamicResources
// plugin a state read for its nominated node alone when a device there
// has the share free (the node the one candidate, its slices alone
// listed); where none has, the state is gathered whole, in place, and the
// candidates are those of a pod not nominated. Both happen here.
func TestNomineeView(t *testing.T) {
	w := newNomineeWorld(t, rand.New(rand.NewPCG(3, 4)))
	d := worldDRA{SharedDRAManager: w.m, slices: w.slices}
	var nis []fwk.NodeInfo
	for i := range 4 {
		nis = append(nis, w.nodeInfo(fmt.Sprintf("n%d", i)))
	}
	full, err := (&draEnv{dra: w.m}).allocatedState()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[bool]int{}
	for _, need := range []claimNeed{{units: 1, bytes: 1}, {units: 90, bytes: 90}, {units: 100, bytes: 100}} {
		for i := range 4 {
			node := fmt.Sprintf("n%d", i)
			pod := &corev1.Pod{Status: corev1.PodStatus{NominatedNodeName: node}}
			env := &draEnv{dra: d, features: structured.Features{ConsumableCapacity: true}}
			ref, _ := env.candidatesIn(pod, nis, w.slices, full, nil, need, "binpack", 4, false)
			partial := len(ref) == 1 && ref[0] == node
			seen[partial]++
			s := &steer{}
			m := steeredManager{SharedDRAManager: d, s: s}
			cyc := &steerCycle{policy: "binpack", narrow: &narrowing{env: env, pod: pod, nodes: nis, need: need, k: 4}, lazy: lazyOf(pod)}
			s.cur.Store(cyc)
			st, err := m.ResourceClaims().GatherAllocatedState()
			if err != nil || len(st.AggregatedCapacity)+len(st.AllocatedDevices) != 0 {
				t.Fatalf("%v, %s: the nominee's state before the slices are listed: not empty (%v)", need, node, err)
			}
			listed, err := m.ResourceSlices().ListWithDeviceTaintRules()
			if err != nil {
				t.Fatal(err)
			}
			want := full
			if partial {
				want = w.gatheredOn(t, node)
			}
			if cyc.lazy.partial != partial {
				t.Errorf("%v, %s: partial %v, want %v", need, node, cyc.lazy.partial, partial)
			}
			if err := sameState(st, want); err != nil {
				t.Errorf("%v, %s: state handed to the plugin: %v", need, node, err)
			}
			cs := cyc.cands.Load()
			if got := fmt.Sprint(cs.names); got != fmt.Sprint(ref) {
				t.Errorf("%v, %s: candidates %s, want %v", need, node, got, ref)
			}
			if partial && len(listed) != len(onlyOf(w.slices, []string{node})) {
				t.Errorf("%v, %s: %d slices listed, want the node's", need, node, len(listed))
			}
		}
	}
	if seen[true] == 0 || seen[false] == 0 {
		t.Fatalf("read alone %d times, gathered whole %d: want both", seen[true], seen[false])
	}
}
