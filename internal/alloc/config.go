package alloc

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// Config holds the allocator's policy knobs.
type Config struct {
	// UtilizationThreshold: GPUs measured above this percent get no new
	// pods. 100 disables the check.
	UtilizationThreshold int32
	// AllowUnscheduledProcesses lets pods onto GPUs busy with processes
	// that no scheduled pod owns.
	AllowUnscheduledProcesses bool
	// HeartbeatTimeout: nodes whose agent's Lease was renewed longer ago
	// (or longer ago than the Lease's own duration) get no new pods.
	HeartbeatTimeout time.Duration
	// DefaultPlacement applies to pods without a placement override.
	DefaultPlacement api.Placement
}

// Busy reports whether a GPU measured at utilization percent is above the
// threshold: it gets no new pods nor claims (GPU pods: Books; pods with
// ResourceClaims: internal/sched's device view).
func (c Config) Busy(utilization int32) bool { return utilization > c.UtilizationThreshold }

// Validate checks the knobs.
func (c Config) Validate() error {
	var errs []error
	if c.UtilizationThreshold < 0 || c.UtilizationThreshold > 100 {
		errs = append(errs, fmt.Errorf("utilizationThreshold %d: want 0..100", c.UtilizationThreshold))
	}
	if c.HeartbeatTimeout <= 0 {
		errs = append(errs, fmt.Errorf("heartbeatTimeout %v: want > 0", c.HeartbeatTimeout))
	}
	if !c.DefaultPlacement.Valid() {
		errs = append(errs, fmt.Errorf("placement %q: want one of %v", c.DefaultPlacement, api.Placements()))
	}
	return errors.Join(errs...)
}
