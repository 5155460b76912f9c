package config

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// ValidateGPUSliceArgs checks defaulted arguments; every problem is listed.
func ValidateGPUSliceArgs(path *field.Path, a *GPUSliceArgs) error {
	var errs field.ErrorList
	if !a.Placement.Valid() {
		errs = append(errs, field.NotSupported(path.Child("placement"), a.Placement, api.Placements()))
	}
	if a.UtilizationThreshold < 0 || a.UtilizationThreshold > 100 {
		errs = append(errs, field.Invalid(path.Child("utilizationThreshold"), a.UtilizationThreshold, "must be in 0-100"))
	}
	if a.HeartbeatTimeout.Duration <= 0 {
		errs = append(errs, field.Invalid(path.Child("heartbeatTimeout"), a.HeartbeatTimeout.Duration.String(), "must be positive"))
	}
	if a.CandidateNodes < 0 {
		errs = append(errs, field.Invalid(path.Child("candidateNodes"), a.CandidateNodes, "must be >= 0"))
	}
	if err := errs.ToAggregate(); err != nil {
		return fmt.Errorf("invalid GPUSliceArgs: %w", err)
	}
	return nil
}
