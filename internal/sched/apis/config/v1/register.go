package v1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	schedv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/sched/apis/config"
)

// SchemeGroupVersion is kube-scheduler's configuration version: the loader
// decodes a plugin's args as <plugin name>Args of this version.
var SchemeGroupVersion = schedv1.SchemeGroupVersion

// AddToScheme registers the versioned GPUSliceArgs in s with their defaults
// and their conversions to and from the internal type.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &GPUSliceArgs{})
	s.AddTypeDefaultingFunc(&GPUSliceArgs{}, func(o any) { SetDefaultsGPUSliceArgs(o.(*GPUSliceArgs)) })
	if err := s.AddConversionFunc((*GPUSliceArgs)(nil), (*config.GPUSliceArgs)(nil), func(a, b any, _ conversion.Scope) error {
		return ConvertToInternal(a.(*GPUSliceArgs), b.(*config.GPUSliceArgs))
	}); err != nil {
		return fmt.Errorf("register GPUSliceArgs conversion: %w", err)
	}
	if err := s.AddConversionFunc((*config.GPUSliceArgs)(nil), (*GPUSliceArgs)(nil), func(a, b any, _ conversion.Scope) error {
		ConvertFromInternal(a.(*config.GPUSliceArgs), b.(*GPUSliceArgs))
		return nil
	}); err != nil {
		return fmt.Errorf("register GPUSliceArgs conversion: %w", err)
	}
	return nil
}

// ConvertToInternal converts defaulted versioned args; an unset field (args
// not defaulted) is an error.
func ConvertToInternal(in *GPUSliceArgs, out *config.GPUSliceArgs) error {
	if in.Placement == nil || in.UtilizationThreshold == nil || in.AllowUnscheduledProcesses == nil ||
		in.HeartbeatTimeout == nil || in.CandidateNodes == nil {
		return fmt.Errorf("GPUSliceArgs not defaulted")
	}
	*out = config.GPUSliceArgs{
		Placement:                 *in.Placement,
		UtilizationThreshold:      *in.UtilizationThreshold,
		AllowUnscheduledProcesses: *in.AllowUnscheduledProcesses,
		HeartbeatTimeout:          *in.HeartbeatTimeout,
		CandidateNodes:            *in.CandidateNodes,
	}
	return nil
}

// ConvertFromInternal converts internal args to the versioned type.
func ConvertFromInternal(in *config.GPUSliceArgs, out *GPUSliceArgs) {
	*out = GPUSliceArgs{
		TypeMeta:                  out.TypeMeta,
		Placement:                 ptr.To(in.Placement),
		UtilizationThreshold:      ptr.To(in.UtilizationThreshold),
		AllowUnscheduledProcesses: ptr.To(in.AllowUnscheduledProcesses),
		HeartbeatTimeout:          ptr.To(in.HeartbeatTimeout),
		CandidateNodes:            ptr.To(in.CandidateNodes),
	}
}
