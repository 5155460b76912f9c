package alloc

import "github.com/gpuslice/gpuslice/pkg/api"

// summary is what a node's GPUs have free as booked (no overlay), over the
// GPUs a pod of any sharing mode could get a share of: an upper bound on
// what any request can get there. Ranking skips a node whose summary rules
// the request out without fitting it GPU by GPU (in a full cluster, nearly
// every node, for every preemptor, twice). Kept up to date by SetNode, Add
// and Release; it depends on nothing else (the Config is fixed, and the
// node's state and Lease are checked apart).
type summary struct {
	// slots: GPUs with a free container slot; empty: those nobody holds.
	slots, empty int
	// maxUnits and maxMemory: the most free units and bytes on any GPU
	// with a free slot (not necessarily the same GPU).
	maxUnits, maxMemory int64
}

// summarize recomputes the node's summary.
func (b *Books) summarize(ns *nodeState) {
	ns.sum = summary{}
	if ns.table == nil {
		return
	}
	var cbuf [stackGPUs]candidate
	cands, _ := b.candidates(ns, &ns.used, nil, "", cbuf[:0])
	for i := range cands {
		k := &cands[i]
		if k.freeSlots <= 0 {
			continue
		}
		ns.sum.slots++
		if k.empty {
			ns.sum.empty++
		}
		ns.sum.maxUnits = max(ns.sum.maxUnits, k.freeUnits)
		ns.sum.maxMemory = max(ns.sum.maxMemory, k.freeMem)
	}
}

// mayFit is false when req cannot fit a node summarized by s: a container
// needs more whole GPUs than nobody holds, more GPUs than have a free slot,
// or more units or memory than the freest GPU has. True says nothing: the
// node must still be fitted.
func (s *summary) mayFit(req *api.PodRequest) bool {
	for _, c := range req.Containers {
		if c.Whole {
			if s.empty < c.Count {
				return false
			}
			continue
		}
		if s.slots < c.Count || s.maxUnits < c.Units || s.maxMemory < c.MemoryBytes {
			return false
		}
	}
	return true
}
