package sched

import (
	"context"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// claimNeed is the largest share one device must give a preemptor's
// claims: units and memory of a consumable-capacity request, or a whole
// device (a request without capacity takes a shared device's whole
// capacity, by the driver's defaults; a device that is not shared is
// always whole).
type claimNeed struct {
	whole        bool
	units, bytes int64
}

func needOf(claims []*resourceapi.ResourceClaim) claimNeed {
	var n claimNeed
	for _, c := range claims {
		for _, r := range c.Spec.Devices.Requests {
			ex := r.Exactly
			if ex == nil && len(r.FirstAvailable) > 0 {
				ex = &resourceapi.ExactDeviceRequest{Capacity: r.FirstAvailable[0].Capacity}
			}
			if ex == nil {
				continue
			}
			if ex.Capacity == nil || len(ex.Capacity.Requests) == 0 {
				n.whole = true
				continue
			}
			if q, ok := ex.Capacity.Requests[capUnits]; ok {
				n.units = max(n.units, q.Value())
			}
			if q, ok := ex.Capacity.Requests[capMemory]; ok {
				n.bytes = max(n.bytes, q.Value())
			}
		}
	}
	return n
}

// draVictims chooses the fewest of cands (lower-priority pods evictions may
// take, least important first) whose claims' deallocation lets claims (the
// pods nominated to the node first, then the preemptor's) be allocated on
// the node, with the claims of the pods in gone (already terminating)
// counted as deallocated. Devices are tried as the device-plugin path tries
// GPUs (alloc.FewestOn on each, the cheapest set first, until the stock
// allocator says the claims fit); a last pass puts back every victim the
// allocator finds unneeded. It returns nothing when the claims fit already,
// and alloc.ErrNoVictims when evicting all of cands would not do.
func (n *draNode) draVictims(ctx context.Context, claims []*resourceapi.ResourceClaim, gone sets.Set[types.UID], cands []alloc.Victim) ([]string, error) {
	fitsWith := func(uids []string) (bool, error) {
		pods := gone.Clone()
		for _, u := range uids {
			pods.Insert(types.UID(u))
		}
		return n.fits(ctx, n.freed(pods), claims)
	}
	if ok, err := fitsWith(nil); ok || err != nil {
		return nil, err
	}
	all := make([]string, len(cands))
	for i, v := range cands {
		all[i] = v.UID
	}
	if ok, err := fitsWith(all); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%w: the claims do not fit on node %s", alloc.ErrNoVictims, n.node.Name)
		}
		return nil, err
	}
	need := needOf(claims)
	var chosen []string
	var targeted []structured.DeviceID
	for {
		ok, err := fitsWith(chosen)
		if err != nil {
			return nil, err
		}
		if ok {
			return n.reprieve(chosen, fitsWith)
		}
		var best *alloc.VictimSet
		var bestDev structured.DeviceID
		for _, id := range n.deviceIDs() {
			if slices.Contains(targeted, id) {
				continue
			}
			if s, ok := n.cheapestOn(id, need, gone, cands, chosen); ok && len(s.UIDs) > 0 && s.Better(best) {
				best, bestDev = &s, id
			}
		}
		if best == nil {
			return n.reprieve(all, fitsWith)
		}
		chosen = append(chosen, best.UIDs...)
		targeted = append(targeted, bestDev)
	}
}

// reprieve puts back each chosen victim, most important (last) first,
// whose eviction the claims do not need.
func (n *draNode) reprieve(chosen []string, fitsWith func([]string) (bool, error)) ([]string, error) {
	out := slices.Clone(chosen)
	for i := len(out) - 1; i >= 0; i-- {
		rest := slices.Delete(slices.Clone(out), i, i+1)
		ok, err := fitsWith(rest)
		if err != nil {
			return nil, err
		}
		if ok {
			out = rest
		}
	}
	return out, nil
}

// deviceIDs lists the node's devices in a stable order.
func (n *draNode) deviceIDs() []structured.DeviceID {
	ids := make([]structured.DeviceID, 0, len(n.devices))
	for id := range n.devices {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b structured.DeviceID) int {
		switch {
		case a.String() < b.String():
			return -1
		case a.String() > b.String():
			return 1
		}
		return 0
	})
	return ids
}

// cheapestOn is the cheapest set of cands (not chosen yet) whose claims free
// need on device id, given what the claims still held there consume (those
// of the pods in gone and chosen released).
func (n *draNode) cheapestOn(id structured.DeviceID, need claimNeed, gone sets.Set[types.UID], cands []alloc.Victim, chosen []string) (alloc.VictimSet, bool) {
	dev := n.devices[id]
	leaving := gone.Clone()
	for _, u := range chosen {
		leaving.Insert(types.UID(u))
	}
	freed := n.freed(leaving)
	owned := n.ownedBy()
	var hs []alloc.DeviceHolder
	holders, exclusive := 0, false
	var usedUnits, usedBytes int64
	ownedHere := 0
	for _, c := range n.held {
		if freed.Has(c.UID) {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if structured.MakeDeviceID(r.Driver, r.Pool, r.Device) != id {
				continue
			}
			holders++
			if r.ShareID == nil {
				exclusive = true
			}
			usedUnits += capValue(r.ConsumedCapacity, capUnits)
			usedBytes += capValue(r.ConsumedCapacity, capMemory)
		}
	}
	if holders == 0 && !exclusive {
		return alloc.VictimSet{}, false // nothing to free here
	}
	for i, v := range cands {
		if slices.Contains(chosen, v.UID) {
			continue
		}
		h := alloc.DeviceHolder{Victim: v, Pos: i}
		found := false
		for _, c := range owned[types.UID(v.UID)] {
			for _, r := range c.Status.Allocation.Devices.Results {
				if structured.MakeDeviceID(r.Driver, r.Pool, r.Device) == id {
					found = true
					ownedHere++
					h.Units += capValue(r.ConsumedCapacity, capUnits)
					h.Bytes += capValue(r.ConsumedCapacity, capMemory)
				}
			}
		}
		if found {
			h.Containers = 1
			hs = append(hs, h)
		}
	}
	shared := dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations
	totalUnits, totalBytes := deviceCap(dev, capUnits), deviceCap(dev, capMemory)
	if need.whole || !shared || exclusive {
		if ownedHere < holders {
			return alloc.VictimSet{}, false // a holder that is not evictable stays
		}
		return alloc.FewestOn(hs, alloc.DeviceNeed{All: true, Holders: len(hs)})
	}
	if need.units > totalUnits || need.bytes > totalBytes {
		return alloc.VictimSet{}, false
	}
	return alloc.FewestOn(hs, alloc.DeviceNeed{Holders: holders,
		Units: need.units - (totalUnits - usedUnits), Bytes: need.bytes - (totalBytes - usedBytes)})
}

func capValue(m map[resourceapi.QualifiedName]resource.Quantity, name resourceapi.QualifiedName) int64 {
	if q, ok := m[name]; ok {
		return q.Value()
	}
	return 0
}

func deviceCap(d resourceapi.Device, name resourceapi.QualifiedName) int64 {
	if c, ok := d.Capacity[name]; ok {
		return c.Value.Value()
	}
	return 0
}
