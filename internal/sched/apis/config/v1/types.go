package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// GPUSliceArgs are the GPUSlice plugin's arguments; unset fields take the
// defaults of SetDefaultsGPUSliceArgs.
//
// +kubebuilder:object:root=true
type GPUSliceArgs struct {
	metav1.TypeMeta `json:",inline"`

	// Placement is the cluster default: first-fit, binpack or spread
	// (default binpack).
	Placement *api.Placement `json:"placement,omitempty"`
	// UtilizationThreshold (percent, 0-100; default 95): GPUs measured above
	// it get no new pods; 100 disables.
	UtilizationThreshold *int32 `json:"utilizationThreshold,omitempty"`
	// AllowUnscheduledProcesses places pods on GPUs busy with processes
	// that no scheduled pod owns (default false: skipped).
	AllowUnscheduledProcesses *bool `json:"allowUnscheduledProcesses,omitempty"`
	// HeartbeatTimeout (default 60s): nodes whose GPUNode heartbeat is
	// older are skipped.
	HeartbeatTimeout *metav1.Duration `json:"heartbeatTimeout,omitempty"`
	// CandidateNodes (default 32): PreFilter ranks every node by free GPU
	// capacity and placement score and hands the scheduler only this many
	// best ones to filter and score; 0 hands over all nodes.
	CandidateNodes *int32 `json:"candidateNodes,omitempty"`
}
