package alloc

import (
	"math"
	"sort"
)

// Quality describes how a set of holdings is laid out over the table.
type Quality struct {
	GPUs        int // healthy GPUs in the table
	UsedGPUs    int // GPUs with any holding
	PartialGPUs int // GPUs partly used (some but not all units)
	// Fragmentation is PartialGPUs / UsedGPUs: 0 when every used GPU is full.
	Fragmentation float64
	// NodeLoadMean and NodeLoadStddev are over the nodes' used-unit
	// fractions; a low stddev means even load.
	NodeLoadMean, NodeLoadStddev float64
	// MaxNodeLoad and MinNodeLoad bound the per-node used-unit fractions.
	MinNodeLoad, MaxNodeLoad float64
}

// Quality computes placement-quality figures for nodes with a table row.
func (b *Books) Quality() Quality {
	var q Quality
	names := make([]string, 0, len(b.nodes))
	for name, ns := range b.nodes {
		if ns.table != nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var loads []float64
	for _, name := range names {
		ns := b.nodes[name]
		var used, total int64
		for _, g := range ns.table.GPUs {
			if !g.Healthy {
				continue
			}
			u := ns.usage(g.Index)
			q.GPUs++
			used += u.Units
			total += g.UnitsTotal
			if u.Pods > 0 {
				q.UsedGPUs++
				if u.Units < g.UnitsTotal {
					q.PartialGPUs++
				}
			}
		}
		if total > 0 {
			loads = append(loads, float64(used)/float64(total))
		}
	}
	if q.UsedGPUs > 0 {
		q.Fragmentation = float64(q.PartialGPUs) / float64(q.UsedGPUs)
	}
	q.NodeLoadMean, q.NodeLoadStddev, q.MinNodeLoad, q.MaxNodeLoad = stats(loads)
	return q
}

func stats(v []float64) (mean, stddev, lo, hi float64) {
	if len(v) == 0 {
		return 0, 0, 0, 0
	}
	lo, hi = v[0], v[0]
	for _, x := range v {
		mean += x
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	mean /= float64(len(v))
	for _, x := range v {
		stddev += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(stddev / float64(len(v))), lo, hi
}
