// Package queuecheck is gpuslice's Kueue admission check (controller name
// gpuslice.io/fits): Kueue admits a Workload by its team's quota, a sum, and
// would hold that quota for a Job whose pods no GPU can take (a share of 150
// units, or more memory than any GPU has). The check rejects such a Workload
// with a message naming the container, what it asks and the largest GPU, so
// that Kueue deactivates it and never admits it; every other Workload is
// Ready. It also warns (an event on the ClusterQueue) about a ClusterQueue
// whose quota names a gpuslice.io resource gpuslice does not serve, or a
// gpuslice quota smaller than one share. On the DRA path Kueue (v0.19)
// counts the units of share claims but not their memory: for a queue with
// both quotas the check keeps the memory bound by rejecting a claim whose
// memory per unit is above the queue's (MemoryVerdict). The decisions are
// pure functions here (Verdict, QueueProblems, MemoryVerdict); controller.go
// and claims.go run them on the API server.
package queuecheck

import (
	"fmt"
	"math"
	"math/big"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// GPU is what one GPU of a node can hold at most.
type GPU struct {
	Units   int64
	Memory  int64
	Sharing api.SharingMode
}

// Node is a node's GPUs (its GPUNode row).
type Node struct {
	Name string
	GPUs []GPU
}

// PodSet is one pod set of a Workload: its pod template and pod count.
type PodSet struct {
	Name     string
	Template corev1.PodTemplateSpec
}

// Verdict says whether every container of every pod set can be held by
// some node's GPUs ("" if so, else why not). A container asking for N GPUs
// fits a node with N GPUs each holding its units and memory (all of a GPU
// for whole GPUs), of its sharing mode where it names one. The cluster's
// current use does not matter: quota is Kueue's, placement the scheduler's.
func Verdict(sets []PodSet, nodes []Node) string {
	for _, ps := range sets {
		pod := &corev1.Pod{ObjectMeta: ps.Template.ObjectMeta, Spec: ps.Template.Spec}
		req, err := api.ParseRequest(pod)
		if err != nil {
			return fmt.Sprintf("pod set %q: %v", ps.Name, err)
		}
		for _, c := range req.Containers {
			if !fitsSomeNode(c, req.Sharing, nodes) {
				return fmt.Sprintf("pod set %q: container %q asks for %s, which no GPU in the cluster can hold (%s)",
					ps.Name, c.Name, describe(c), largest(nodes))
			}
		}
	}
	return ""
}

func fitsSomeNode(c api.ContainerRequest, sharing api.SharingMode, nodes []Node) bool {
	for _, n := range nodes {
		holding := 0
		for _, g := range n.GPUs {
			if sharing != "" && g.Sharing != "" && g.Sharing != sharing {
				continue
			}
			if c.Whole || (c.Units <= g.Units && c.MemoryBytes <= g.Memory) {
				holding++
			}
		}
		if holding >= c.Count {
			return true
		}
	}
	return false
}

func describe(c api.ContainerRequest) string {
	if c.Whole {
		return fmt.Sprintf("%d whole GPUs on one node", c.Count)
	}
	s := fmt.Sprintf("%d units and %s of memory", c.Units, resource.NewQuantity(c.MemoryBytes, resource.BinarySI))
	if c.Count > 1 {
		s += fmt.Sprintf(" on each of %d GPUs of one node", c.Count)
	} else {
		s += " of one GPU"
	}
	return s
}

// largest describes the cluster's largest GPU and node.
func largest(nodes []Node) string {
	var units, mem int64
	most := 0
	for _, n := range nodes {
		most = max(most, len(n.GPUs))
		for _, g := range n.GPUs {
			units, mem = max(units, g.Units), max(mem, g.Memory)
		}
	}
	if most == 0 {
		return "the cluster has no GPUs"
	}
	return fmt.Sprintf("the largest GPU has %d units and %s, the largest node %d GPUs",
		units, resource.NewQuantity(mem, resource.BinarySI), most)
}

// Quota is one resource of a ClusterQueue's flavor: its nominal quota and
// borrowing limit (nil: in a cohort, all of the cohort's unused quota;
// outside one, nothing).
type Quota struct {
	Flavor    string
	Name      corev1.ResourceName
	Nominal   resource.Quantity
	Borrowing *resource.Quantity
	InCohort  bool
}

// oneShare is the smallest share gpuslice hands out of a resource it
// serves: one unit or GPU, or the memory step (devices.MemoryStep, the device
// plugin's and the DRA driver's).
func oneShare(name corev1.ResourceName) (step int64, served bool) {
	switch name {
	case api.ResourceUnits, api.ResourceGPU:
		return 1, true
	case api.ResourceMemory:
		return devices.MemoryStep, true
	}
	return 0, false
}

// QueueProblems lists what is wrong with a ClusterQueue's gpuslice quota:
// names in the gpuslice.io domain that gpuslice does not serve, amounts of
// units or GPUs that are not whole, and quotas that can never hold one
// share (nominal plus borrowing limit above zero but below one unit or
// 1 MiB). Sorted; empty if nothing is.
func QueueProblems(quotas []Quota) []string {
	var out []string
	for _, q := range quotas {
		if !strings.HasPrefix(string(q.Name), api.Group+"/") {
			continue
		}
		step, served := oneShare(q.Name)
		if !served {
			out = append(out, fmt.Sprintf("flavor %s: %s is not a resource gpuslice serves (%s, %s, %s)",
				q.Flavor, q.Name, api.ResourceGPU, api.ResourceUnits, api.ResourceMemory))
			continue
		}
		if q.Name != api.ResourceMemory && !whole(q.Nominal) {
			out = append(out, fmt.Sprintf("flavor %s: %s nominal quota %s is not a whole number", q.Flavor, q.Name, q.Nominal.String()))
			continue
		}
		most := q.Nominal.AsApproximateFloat64()
		switch {
		case q.Borrowing != nil && q.InCohort:
			most += q.Borrowing.AsApproximateFloat64()
		case q.InCohort:
			most = math.Inf(1)
		}
		if most > 0 && most < float64(step) {
			out = append(out, fmt.Sprintf("flavor %s: %s quota %s (with its borrowing limit) is smaller than one share (%s)",
				q.Flavor, q.Name, q.Nominal.String(), shareOf(q.Name, step)))
		}
	}
	sort.Strings(out)
	return out
}

func whole(q resource.Quantity) bool {
	v, ok := q.AsInt64()
	return ok && v >= 0
}

func shareOf(name corev1.ResourceName, step int64) string {
	if name == api.ResourceMemory {
		return resource.NewQuantity(step, resource.BinarySI).String()
	}
	return fmt.Sprint(step)
}

// ClaimShare is one request of a ResourceClaimTemplate a Workload's pods
// use on gpuslice's share class: Count devices of Units and Memory each.
type ClaimShare struct {
	Template, Request string
	Count             int64
	Units, Memory     int64
}

// QueueRatio is a ClusterQueue's gpuslice quota in units and memory
// (nominal, and nominal plus borrowing limit where it has one).
type QueueRatio struct {
	Name                  string
	Units, Memory         int64
	UnitsMost, MemoryMost int64
	HasUnits, HasMemory   bool
}

// MemoryVerdict is the DRA path's memory rule ("" if every share keeps
// it). Kueue (v0.19) charges a claim on share.gpuslice.io one capacity, its
// units, so a queue's memory quota would go uncounted; a queue that has
// both therefore admits a claim only if its memory per unit is at most the
// queue's (memory quota / units quota, nominal and with borrowing, the
// smaller): then the units Kueue counts bound the memory too.
func MemoryVerdict(shares []ClaimShare, q QueueRatio) string {
	if !q.HasUnits || !q.HasMemory || q.Units <= 0 {
		return ""
	}
	for _, s := range shares {
		allowed := perUnits(s.Units, q.Memory, q.Units)
		if q.UnitsMost > 0 {
			allowed = min(allowed, perUnits(s.Units, q.MemoryMost, q.UnitsMost))
		}
		if s.Memory > allowed {
			return fmt.Sprintf("ResourceClaimTemplate %s, request %q: %d units and %s of memory; ClusterQueue %s's quota (%d units, %s; with borrowing %d, %s) allows at most %s with %d units: Kueue counts the units of DRA claims, and the queue's memory is kept by each claim's memory per unit",
				s.Template, s.Request, s.Units, bytes(s.Memory), q.Name, q.Units, bytes(q.Memory), q.UnitsMost, bytes(q.MemoryMost),
				bytes(allowed), s.Units)
		}
	}
	return ""
}

// perUnits is floor(units * memory / quotaUnits), at most MaxInt64.
func perUnits(units, memory, quotaUnits int64) int64 {
	v := new(big.Int).Mul(big.NewInt(units), big.NewInt(memory))
	v.Quo(v, big.NewInt(quotaUnits))
	if !v.IsInt64() {
		return math.MaxInt64
	}
	return v.Int64()
}

func bytes(v int64) string { return resource.NewQuantity(v, resource.BinarySI).String() }
