package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// GPUSliceArgs are the GPUSlice plugin's arguments, defaulted.
//
// +kubebuilder:object:root=true
type GPUSliceArgs struct {
	metav1.TypeMeta

	// Placement is the cluster default: first-fit, binpack or spread.
	Placement api.Placement
	// UtilizationThreshold (percent, 0-100): GPUs measured above it get no
	// new pods; 100 disables.
	UtilizationThreshold int32
	// AllowUnscheduledProcesses places pods on GPUs busy with processes
	// that no scheduled pod owns.
	AllowUnscheduledProcesses bool
	// HeartbeatTimeout: nodes whose GPUNode heartbeat is older are skipped.
	HeartbeatTimeout metav1.Duration
	// CandidateNodes: how many best-ranked nodes PreFilter hands the
	// scheduler to filter and score; 0 hands over all nodes.
	CandidateNodes int32
}
