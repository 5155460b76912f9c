package alloc

import (
	"slices"
	"time"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// Overlay is a what-if on one node's books, as kube-scheduler's preemption
// dry run and its nominated pods need: pods taken off the node (would-be
// victims) and pods put on it (pods nominated to the node, placed before
// the pod being checked, in order). It changes nothing in the books; Fit,
// Check and Victims take one.
type Overlay struct {
	// Removed are UIDs of booked pods whose holdings on the node are not
	// counted.
	Removed []string
	// Added are requests charged first, in order; one that does not fit
	// charges nothing (it cannot hold capacity that is not there).
	Added []Nominated
}

// Nominated is a pod that is not booked yet, with its request.
type Nominated struct {
	UID string
	Req *api.PodRequest
}

// Empty reports whether o changes nothing (a nil overlay is empty).
func (o *Overlay) Empty() bool { return o == nil || len(o.Removed) == 0 && len(o.Added) == 0 }

// Clone copies o (nil stays nil).
func (o *Overlay) Clone() *Overlay {
	if o == nil {
		return nil
	}
	return &Overlay{Removed: slices.Clone(o.Removed), Added: slices.Clone(o.Added)}
}

// Remove takes pod uid off: an added pod is dropped, a booked one counted
// out (booked says whether the books hold it on this node; others are
// ignored).
func (o *Overlay) Remove(uid string, booked bool) {
	if i := slices.IndexFunc(o.Added, func(n Nominated) bool { return n.UID == uid }); i >= 0 {
		o.Added = slices.Delete(o.Added, i, i+1)
		return
	}
	if booked && !slices.Contains(o.Removed, uid) {
		o.Removed = append(o.Removed, uid)
	}
}

// Restore counts a removed pod in again and reports whether it was removed.
func (o *Overlay) Restore(uid string) bool {
	i := slices.Index(o.Removed, uid)
	if i < 0 {
		return false
	}
	o.Removed = slices.Delete(o.Removed, i, i+1)
	return true
}

// Add puts an unbooked pod's request on the node (again: a pod already
// added is not added twice).
func (o *Overlay) Add(uid string, req *api.PodRequest) {
	if !slices.ContainsFunc(o.Added, func(n Nominated) bool { return n.UID == uid }) {
		o.Added = append(o.Added, Nominated{UID: uid, Req: req})
	}
}

// CheckWith is Check on the node as o leaves it.
func (b *Books) CheckWith(node string, req *api.PodRequest, now time.Time, o *Overlay) error {
	return b.fit(node, req, now, o, nil, true)
}

// overlaid lists the node's candidate GPUs as o leaves them: the removed
// pods' holdings uncounted, then the added pods charged.
func (b *Books) overlaid(node string, ns *nodeState, o *Overlay, sharing api.SharingMode, out []candidate) ([]candidate, skipped) {
	used, freed := b.without(node, ns, o.Removed)
	cands, sk := b.candidates(ns, &used, freed, sharing, out)
	for _, n := range o.Added {
		b.charge(cands, n.Req)
	}
	return cands, sk
}

// without is the node's usage with the given pods' holdings taken away,
// and the GPUs they held.
func (b *Books) without(node string, ns *nodeState, removed []string) (usageSet, []int32) {
	used := ns.used.clone()
	var freed []int32
	for _, uid := range removed {
		a := b.pods[uid]
		if a == nil || a.Node != node {
			continue
		}
		used.apply(a, -1)
		for _, c := range a.Containers {
			for _, g := range c.GPUs {
				if !slices.Contains(freed, g.Index) {
					freed = append(freed, g.Index)
				}
			}
		}
	}
	return used, freed
}

// charge places req on the candidates by its policy and takes its shares
// from them, all of its containers or none. GPUs of a sharing mode req
// does not accept are left alone.
func (b *Books) charge(cands []candidate, req *api.PodRequest) {
	if req == nil {
		return
	}
	var tbuf [stackGPUs]candidate
	try := append(tbuf[:0], cands...)
	for i := range try {
		if !try[i].gpu.Mode.Accepts(req.Sharing) {
			try[i].freeSlots = 0 // pick passes it by
		}
	}
	policy := b.policy(req)
	for _, c := range req.Containers {
		var pbuf [stackGPUs]int
		if chosen, _ := pick(try, c, policy, pbuf[:0]); chosen == nil {
			return
		}
	}
	for i := range try {
		if !try[i].gpu.Mode.Accepts(req.Sharing) {
			continue
		}
		cands[i] = try[i]
	}
}
