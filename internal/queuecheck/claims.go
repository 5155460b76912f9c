package queuecheck

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/pkg/api"
)

var claimTemplatesGVR = schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaimtemplates"}

// draMemory applies MemoryVerdict to a Workload admitted to a ClusterQueue
// ("" when it keeps the rule or uses no share claims).
func (c *Controller) draMemory(ctx context.Context, u *unstructured.Unstructured, sets []PodSet, nodes []Node) (string, error) {
	cq, _, _ := unstructured.NestedString(u.Object, "status", "admission", "clusterQueue")
	if cq == "" {
		return "", nil
	}
	obj, err := c.cqs.Get(cq)
	if err != nil {
		return "", fmt.Errorf("cluster queue %s: %w", cq, err)
	}
	q, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return "", nil
	}
	ratio := ratioOf(cq, quotasOf(q))
	if !ratio.HasUnits || !ratio.HasMemory {
		return "", nil
	}
	var shares []ClaimShare
	for _, ps := range sets {
		for _, rc := range ps.Template.Spec.ResourceClaims {
			if rc.ResourceClaimTemplateName == nil {
				continue
			}
			got, err := c.templateShares(ctx, u.GetNamespace(), *rc.ResourceClaimTemplateName, nodes)
			if err != nil {
				return "", err
			}
			shares = append(shares, got...)
		}
	}
	return MemoryVerdict(shares, ratio), nil
}

// ratioOf is a ClusterQueue's units and memory quota (its first flavor
// naming each).
func ratioOf(name string, quotas []Quota) QueueRatio {
	r := QueueRatio{Name: name}
	for _, q := range quotas {
		most := int64(0)
		if q.Borrowing != nil && q.InCohort {
			most = q.Nominal.Value() + q.Borrowing.Value()
		} else if !q.InCohort {
			most = q.Nominal.Value()
		}
		switch {
		case q.Name == api.ResourceUnits && !r.HasUnits:
			r.Units, r.UnitsMost, r.HasUnits = q.Nominal.Value(), most, true
		case q.Name == api.ResourceMemory && !r.HasMemory:
			r.Memory, r.MemoryMost, r.HasMemory = q.Nominal.Value(), most, true
		}
	}
	if r.UnitsMost == 0 || r.MemoryMost == 0 {
		r.UnitsMost, r.MemoryMost = 0, 0 // unlimited borrowing: the nominal ratio alone
	}
	return r
}

// templateShares reads the share-class requests of a ResourceClaimTemplate.
// A request without a capacity request takes the device's default: all of
// the GPU (its units, and the largest GPU's memory).
func (c *Controller) templateShares(ctx context.Context, ns, name string, nodes []Node) ([]ClaimShare, error) {
	t, err := c.cfg.Dynamic.Resource(claimTemplatesGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("resource claim template %s/%s: %w", ns, name, err)
	}
	reqs, _, _ := unstructured.NestedSlice(t.Object, "spec", "spec", "devices", "requests")
	var gpuUnits, gpuMemory int64
	for _, n := range nodes {
		for _, g := range n.GPUs {
			gpuUnits, gpuMemory = max(gpuUnits, g.Units), max(gpuMemory, g.Memory)
		}
	}
	var out []ClaimShare
	for _, r := range reqs {
		m := asMap(r)
		ex := asMap(m["exactly"])
		if class, _ := ex["deviceClassName"].(string); class != devices.ClassShare {
			continue
		}
		s := ClaimShare{Template: name, Count: 1, Units: gpuUnits, Memory: gpuMemory}
		s.Request, _ = m["name"].(string)
		if n, ok, _ := unstructured.NestedInt64(ex, "count"); ok && n > 0 {
			s.Count = n
		}
		caps, _, _ := unstructured.NestedMap(ex, "capacity", "requests")
		if v, ok := caps[string(devices.CapacityUnits)]; ok {
			q := quantity(v)
			s.Units = q.Value()
		}
		if v, ok := caps[string(devices.CapacityMemory)]; ok {
			q := quantity(v)
			s.Memory = q.Value()
		}
		out = append(out, s)
	}
	return out, nil
}
