package sched

import (
	"context"
	"errors"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"
)

// lagDRA is a claim tracker whose claims (list) and allocated state (st)
// are read apart, as the DRA manager's: the informer's event updates the
// claims first and the allocated state after.
type lagDRA struct {
	fwk.SharedDRAManager
	list []*resourceapi.ResourceClaim
	st   *structured.AllocatedState
	err  error // the state's read
	// pending: the claims' allocations in flight (by claim UID).
	pending map[types.UID]*resourceapi.AllocationResult
}

func (f *lagDRA) ResourceClaims() fwk.ResourceClaimTracker { return lagClaims{f: f} }

type lagClaims struct {
	fwk.ResourceClaimTracker
	f *lagDRA
}

func (c lagClaims) List() ([]*resourceapi.ResourceClaim, error) { return c.f.list, nil }

func (c lagClaims) GatherAllocatedState() (*structured.AllocatedState, error) { return c.f.st, c.f.err }

func (c lagClaims) GetPendingAllocation(uid types.UID) *resourceapi.AllocationResult {
	return c.f.pending[uid]
}

// noHolds is books that hold no GPU for anybody.
type noHolds struct{ Allocator }

func (noHolds) Holds(string, string) bool { return false }

func allocState(whole []string, shares map[string]types.UID) *structured.AllocatedState {
	st := &structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	for _, d := range whole {
		st.AllocatedDevices.Insert(structured.MakeDeviceID(testDriver, "n", d))
	}
	for d, s := range shares {
		st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(structured.MakeDeviceID(testDriver, "n", d), ptr.To(s)))
	}
	return st
}

// TestHoldsUntilAllocatedStateReleases: the victim v's named claim (gpu-0
// whole, or a share of it) is released by the claim releaser. Until the
// tracker's allocated state no longer has what it was allocated, v still
// holds, although the tracker's claim is deallocated already: a preemptor
// retried in that window found gpu-0 taken by nobody in its dry run and
// evicted the pod on gpu-1 as well (TestDRAPreemptWholeGPU, 1 run in 12).
// gpu-0 allocated whole to another claim of the tracker, or its state not
// readable: as written in the cases.
func TestHoldsUntilAllocatedStateReleases(t *testing.T) {
	other := claimReservedFor("other", "x") // gpu-0, whole
	next := claimReservedFor("next")        // gpu-0 pending (inFlight)
	nextAlloc := next.Status.Allocation
	next.UID, next.Status.Allocation = "next", nil
	for _, c := range []struct {
		name     string
		share    bool                                // v's claim is a share of gpu-0 (id "s1")
		released bool                                // the releaser wrote it (else: not a victim it released)
		list     func() []*resourceapi.ResourceClaim // the tracker's claims
		st       *structured.AllocatedState
		err      error
		inFlight bool // gpu-0 pending for claim "next" of the tracker (allocated, not written yet)
		want     bool
	}{
		{"tracker has it allocated for v", false, true, func() []*resourceapi.ResourceClaim { return []*resourceapi.ResourceClaim{claimReservedFor("own", "v")} },
			allocState([]string{"gpu-0"}, nil), nil, false, true},
		{"claims released, state not yet", false, true, nil, allocState([]string{"gpu-0"}, nil), nil, false, true},
		{"claims and state released", false, true, nil, allocState(nil, nil), nil, false, false},
		{"state: gpu-0 allocated to another claim", false, true, func() []*resourceapi.ResourceClaim { return []*resourceapi.ResourceClaim{other} },
			allocState([]string{"gpu-0"}, nil), nil, false, false},
		{"state: gpu-0 in flight for another claim", false, true, func() []*resourceapi.ResourceClaim { return []*resourceapi.ResourceClaim{next} },
			allocState([]string{"gpu-0"}, nil), nil, true, false},
		{"state unreadable", false, true, nil, nil, errors.New("concurrent modification"), false, true},
		{"share released, state not yet", true, true, nil, allocState(nil, map[string]types.UID{"gpu-0": "s1"}), nil, false, true},
		{"share released, state has another share", true, true, nil, allocState(nil, map[string]types.UID{"gpu-0": "s2"}), nil, false, false},
		{"not released by the releaser", false, false, nil, allocState([]string{"gpu-0"}, nil), nil, false, false},
	} {
		claim := claimReservedFor("own", "v")
		if c.share {
			claim.Status.Allocation.Devices.Results[0].ShareID = ptr.To(types.UID("s1"))
		}
		r := newClaimReleaser(fake.NewClientset(claim), nil, time.Minute)
		if c.released {
			if err := r.release(context.Background(), podUsing("v", "own"), "own"); err != nil {
				t.Fatal(err)
			}
		}
		var list []*resourceapi.ResourceClaim
		if c.list != nil {
			list = c.list()
		}
		f := &lagDRA{list: list, st: c.st, err: c.err}
		if c.inFlight {
			f.pending = map[types.UID]*resourceapi.AllocationResult{"next": nextAlloc}
		}
		pr := &preemptor{alloc: noHolds{}, dra: &draEnv{dra: f}, release: r}
		if got := pr.holds("v", "n"); got != c.want {
			t.Errorf("%s: holds %v, want %v", c.name, got, c.want)
		}
		if c.want || !c.released {
			continue
		}
		// Caught up: the record is gone; a later state that has gpu-0
		// (allocated anew, in flight) is not v's.
		pr.dra.dra.(*lagDRA).st = allocState([]string{"gpu-0"}, map[string]types.UID{"gpu-0": "s1"})
		pr.dra.dra.(*lagDRA).list = nil
		if pr.holds("v", "n") {
			t.Errorf("%s: v holds again after its release was seen", c.name)
		}
	}
}
