package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// Defaults of GPUSliceArgs.
const (
	DefaultPlacement            = api.PlacementBinpack
	DefaultUtilizationThreshold = 95
	DefaultHeartbeatTimeout     = 60 * time.Second
	DefaultCandidateNodes       = 32
)

// SetDefaultsGPUSliceArgs fills the unset fields of a.
func SetDefaultsGPUSliceArgs(a *GPUSliceArgs) {
	if a.Placement == nil {
		a.Placement = ptr.To(DefaultPlacement)
	}
	if a.UtilizationThreshold == nil {
		a.UtilizationThreshold = ptr.To[int32](DefaultUtilizationThreshold)
	}
	if a.AllowUnscheduledProcesses == nil {
		a.AllowUnscheduledProcesses = ptr.To(false)
	}
	if a.HeartbeatTimeout == nil {
		a.HeartbeatTimeout = &metav1.Duration{Duration: DefaultHeartbeatTimeout}
	}
	if a.CandidateNodes == nil {
		a.CandidateNodes = ptr.To[int32](DefaultCandidateNodes)
	}
}
