package sched

import (
	"context"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/dra"
	"github.com/gpuslice/gpuslice/internal/dra/devices"
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
// and alloc.ErrNoVictims when evicting all of cands would not do. The
// allocator runs once per set of victims asked about (fitsMemo): a single
// victim costs two runs (none, then it), where every victim at once is
// asked only when the numbers find no device to free.
func (n *draNode) draVictims(ctx context.Context, claims []*resourceapi.ResourceClaim, gone sets.Set[types.UID], cands []alloc.Victim) ([]string, error) {
	fitsWith := n.fitsMemo(ctx, claims, gone)
	if ok, err := fitsWith(nil); ok || err != nil {
		return nil, err
	}
	need := needOf(claims)
	var chosen []string
	var targeted []structured.DeviceID
	for {
		if len(chosen) > 0 {
			ok, err := fitsWith(chosen)
			if err != nil {
				return nil, err
			}
			if ok {
				return n.reprieve(chosen, fitsWith)
			}
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
			return n.allVictims(cands, fitsWith)
		}
		chosen = append(chosen, best.UIDs...)
		targeted = append(targeted, bestDev)
	}
}

// allVictims is draVictims' last resort: every candidate, less those the
// allocator finds unneeded; alloc.ErrNoVictims when even all of them do
// not make room.
func (n *draNode) allVictims(cands []alloc.Victim, fitsWith func([]string) (bool, error)) ([]string, error) {
	all := make([]string, len(cands))
	for i, v := range cands {
		all[i] = v.UID
	}
	ok, err := fitsWith(all)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: the claims do not fit on node %s", alloc.ErrNoVictims, n.node.Name)
	}
	return n.reprieve(all, fitsWith)
}

// fitsMemo is whether claims fit on the node once the pods in gone and in
// the victims asked about are gone, by the stock allocator, run once per
// set of victims (the search and the reprieve ask about the same sets).
func (n *draNode) fitsMemo(ctx context.Context, claims []*resourceapi.ResourceClaim, gone sets.Set[types.UID]) func([]string) (bool, error) {
	seen := map[string]bool{}
	return func(uids []string) (bool, error) {
		key := slices.Clone(uids)
		slices.Sort(key)
		k := strings.Join(key, ",")
		if ok, done := seen[k]; done {
			return ok, nil
		}
		pods := gone.Clone()
		for _, u := range uids {
			pods.Insert(types.UID(u))
		}
		ok, err := n.fits(ctx, n.freed(pods), claims)
		if err == nil {
			seen[k] = ok
		}
		return ok, err
	}
}

// withoutBusy leaves out of the node's slices (a copy) the devices of
// gpuslice.io's driver whose GPU is in busy (the GPUs the device view hides
// from the pod) and that no claim of a pod in gone or cands holds: evicting
// pods would free there a device the pod will not be let onto. A busy
// device a candidate holds stays (once the pod is nominated here the view
// shows it: part of what was measured is the victims' work).
func (n *draNode) withoutBusy(busy map[string]bool, gone sets.Set[types.UID], cands []alloc.Victim) {
	if len(busy) == 0 {
		return
	}
	leaving := gone.Clone()
	for _, v := range cands {
		leaving.Insert(types.UID(v.UID))
	}
	freeable := sets.New[structured.DeviceID]()
	for _, c := range n.held {
		if !slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return leaving.Has(r.UID) }) {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			freeable.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	out := make([]*resourceapi.ResourceSlice, 0, len(n.slices))
	for _, sl := range n.slices {
		var keep []resourceapi.Device
		for i, d := range sl.Spec.Devices {
			id := structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, d.Name)
			hide := sl.Spec.Driver == dra.DriverName && busy[ptr.Deref(d.Attributes[devices.AttrUUID].StringValue, "")] && !freeable.Has(id)
			if hide && keep == nil {
				keep = append(make([]resourceapi.Device, 0, len(sl.Spec.Devices)), sl.Spec.Devices[:i]...)
			}
			if hide {
				delete(n.devices, id)
			} else if keep != nil {
				keep = append(keep, d)
			}
		}
		if keep != nil {
			c := *sl
			c.Spec.Devices = keep
			sl = &c
		}
		out = append(out, sl)
	}
	n.slices = out
}

// freedGPUs are the GPUs (gpuslice.io devices' UUIDs) on which evicting
// pods deallocates a claim (freed): the busy GPUs the device view may then
// show the preemptor.
func (n *draNode) freedGPUs(pods sets.Set[types.UID]) []string {
	var out []string
	for _, c := range n.held {
		if !releasedBy(c, pods) {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			d, ok := n.devices[structured.MakeDeviceID(r.Driver, r.Pool, r.Device)]
			if u := ptr.Deref(d.Attributes[devices.AttrUUID].StringValue, ""); ok && r.Driver == dra.DriverName && u != "" && !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
	}
	return out
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
	leaving := gone
	if len(chosen) > 0 {
		leaving = gone.Clone()
		for _, u := range chosen {
			leaving.Insert(types.UID(u))
		}
	}
	use, hs := n.onDevice(id, leaving, cands)
	if use.holders == 0 {
		return alloc.VictimSet{}, false // nothing to free here
	}
	dev := n.devices[id]
	shared := dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations
	totalUnits, totalBytes := deviceCap(dev, capUnits), deviceCap(dev, capMemory)
	if need.whole || !shared || use.exclusive {
		if use.owned < use.holders {
			return alloc.VictimSet{}, false // a holder that is not evictable stays
		}
		return alloc.FewestOn(hs, alloc.DeviceNeed{All: true, Holders: len(hs)})
	}
	if need.units > totalUnits || need.bytes > totalBytes {
		return alloc.VictimSet{}, false
	}
	return alloc.FewestOn(hs, alloc.DeviceNeed{Holders: use.holders,
		Units: need.units - (totalUnits - use.units), Bytes: need.bytes - (totalBytes - use.bytes)})
}

// devUse is what the claims still held on one device consume: allocation
// results (holders), whether one holds the device whole, units and bytes;
// owned counts the results of claims reserved for one candidate alone.
type devUse struct {
	holders, owned int
	exclusive      bool
	units, bytes   int64
}

// onDevice reads device id's use, the claims of the pods in leaving
// released, and each candidate's (not leaving) share of it through the
// claims reserved for it alone, in the candidates' order. One pass over
// the node's claims, comparing names (no device ID made per claim, no map:
// the shortlist asks it for every device of every full node).
func (n *draNode) onDevice(id structured.DeviceID, leaving sets.Set[types.UID], cands []alloc.Victim) (devUse, []alloc.DeviceHolder) {
	drv, pool, name := id.Driver.String(), id.Pool.String(), id.Device.String()
	var use devUse
	var hs []alloc.DeviceHolder
	for _, c := range n.held {
		kept := !releasedBy(c, leaving)
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Device != name || r.Pool != pool || r.Driver != drv {
				continue
			}
			units, bytes := capValue(r.ConsumedCapacity, capUnits), capValue(r.ConsumedCapacity, capMemory)
			if kept {
				use.holders++
				use.exclusive = use.exclusive || r.ShareID == nil
				use.units, use.bytes = use.units+units, use.bytes+bytes
			}
			if h := holderOf(&hs, soleConsumer(c), leaving, cands); h != nil {
				h.Units, h.Bytes = h.Units+units, h.Bytes+bytes
				use.owned++
			}
		}
	}
	slices.SortFunc(hs, func(a, b alloc.DeviceHolder) int { return a.Pos - b.Pos })
	return use, hs
}

// holderOf is owner's entry in hs (added on first use) when owner is one of
// cands not leaving; nil otherwise.
func holderOf(hs *[]alloc.DeviceHolder, owner types.UID, leaving sets.Set[types.UID], cands []alloc.Victim) *alloc.DeviceHolder {
	if owner == "" || leaving.Has(owner) {
		return nil
	}
	for i := range *hs {
		if (*hs)[i].UID == string(owner) {
			return &(*hs)[i]
		}
	}
	i := slices.IndexFunc(cands, func(v alloc.Victim) bool { return v.UID == string(owner) })
	if i < 0 {
		return nil
	}
	*hs = append(*hs, alloc.DeviceHolder{Victim: cands[i], Pos: i, Containers: 1})
	return &(*hs)[len(*hs)-1]
}

// soleConsumer is the one pod a claim is reserved for ("" when it is
// shared or reserved for none): evicting that pod frees the claim.
func soleConsumer(c *resourceapi.ResourceClaim) types.UID {
	if r := c.Status.ReservedFor; len(r) == 1 && r[0].Resource == "pods" && r[0].APIGroup == "" {
		return r[0].UID
	}
	return ""
}

// releasedBy reports whether every consumer of c is among pods (a claim
// reserved for none is not released by evictions).
func releasedBy(c *resourceapi.ResourceClaim, pods sets.Set[types.UID]) bool {
	r := c.Status.ReservedFor
	if len(r) == 0 {
		return false
	}
	for _, ref := range r {
		if ref.Resource != "pods" || ref.APIGroup != "" || !pods.Has(ref.UID) {
			return false
		}
	}
	return true
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
