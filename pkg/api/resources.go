package api

import corev1 "k8s.io/api/core/v1"

// Group is the API group of gpuslice resources, annotations and the GPUNode CRD.
const Group = "gpuslice.io"

// Extended resources a container asks for in resources.limits (and/or requests).
//
//   - ResourceGPU: number of GPUs. Alone it means whole, exclusive GPUs.
//   - ResourceMemory: GPU memory per GPU, in bytes (quantities like "8Gi").
//   - ResourceUnits: logical compute units per GPU (a GPU has GPU.UnitsTotal,
//     100 by default, so units read as percent of the GPU).
//
// Memory or units without ResourceGPU mean a share of one GPU. ResourceGPU
// with memory and/or units means that share on each of that many GPUs.
const (
	ResourceGPU    corev1.ResourceName = Group + "/gpu"
	ResourceMemory corev1.ResourceName = Group + "/gpu-memory"
	ResourceUnits  corev1.ResourceName = Group + "/gpu-units"
)

// Annotations on pods.
const (
	// AnnotationAssignment holds the JSON Assignment the scheduler wrote.
	AnnotationAssignment = Group + "/assignment"
	// AnnotationPlacement overrides the cluster's placement policy for one pod.
	AnnotationPlacement = Group + "/placement"
)

// DefaultUnitsPerGPU is the number of logical units of a GPU whose table entry
// does not say otherwise.
const DefaultUnitsPerGPU = 100

// MaxContainersPerGPU is the most containers the scheduler places on one
// GPU; the node agent's device plugin advertises that many slots of
// ResourceGPU per GPU, so the kubelet never refuses what the scheduler
// booked.
const MaxContainersPerGPU = 100

// Placement is a placement policy: which node and which GPUs a pod gets among
// those that fit.
type Placement string

// Placement policies.
const (
	// PlacementFirstFit takes GPUs in index order; all fitting nodes score alike.
	PlacementFirstFit Placement = "first-fit"
	// PlacementBinpack fills the most used nodes and GPUs first (low fragmentation).
	PlacementBinpack Placement = "binpack"
	// PlacementSpread prefers the least used nodes and GPUs (even load).
	PlacementSpread Placement = "spread"
)

// Placements lists the valid policies.
func Placements() []Placement {
	return []Placement{PlacementFirstFit, PlacementBinpack, PlacementSpread}
}

// Valid reports whether p names a known policy.
func (p Placement) Valid() bool {
	for _, q := range Placements() {
		if p == q {
			return true
		}
	}
	return false
}

// IsGPUSliceResource reports whether name is in the gpuslice.io domain.
func IsGPUSliceResource(name corev1.ResourceName) bool {
	return len(name) > len(Group)+1 && string(name[:len(Group)+1]) == Group+"/"
}

// AnnotationDrain on a GPUNode: "true" makes its node agent publish the node
// Draining (no new pods; pods already there keep running), as cordoning the
// Node does.
const AnnotationDrain = Group + "/drain"
