// Package gpurequest is what a user asks of one group's GPUs, whichever way
// it came (gpuslice run's flags, a pod's device-plugin assignment and
// annotations, a DRA claim's allocation and GPUShareConfig), and the one
// translation of it into the group's settings. Each entry point reads its
// own input into a Request (and rejects what its users may not write, naming
// their field); the share of a units request, its rounding, the memory limit
// of several GPUs and the elastic and slice rules are decided here only.
package gpurequest

import (
	"fmt"
	"math"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/internal/units"
)

// GPU is a request's part of one GPU: Units of the GPU's Total units (0, or
// at least Total: the whole GPU's time, no share) and Memory bytes on it (0:
// no limit).
type GPU struct {
	Units, Total int64
	Memory       uint64
}

// Request is what a user asks of one group.
type Request struct {
	// GPUs are the group's parts of its GPUs: the smallest share of units and
	// the smallest memory over them are the group's.
	GPUs []GPU
	// Share is a share of the GPU's time asked directly (gpuslice run
	// --share), for a request without units; a units share wins over it.
	Share float64
	// Slice is the slice length of a group without a share (with one, the
	// share sets its time and Slice is not used).
	Slice time.Duration
	// ShareMax is the ceiling on the group's share, [policy.MinShareMax, 1]; 0: none.
	ShareMax float64
	// Priority is "high" or "low" (also "online", "offline"); "" is low.
	Priority string
	// MemoryCeiling is elastic memory's ceiling per GPU: the GPUs' memory is
	// then the guarantee. 0: none; one without a guarantee is refused
	// (ErrCeilingWithoutGuarantee).
	MemoryCeiling uint64
	// Spill lets borrowed memory move to host memory (needs MemoryCeiling).
	Spill bool
}

// Errors of the rules a request breaks (each wraps group.ErrInvalid).
var (
	ErrCeilingBelowGuarantee = fmt.Errorf("%w: elastic memory ceiling below the guarantee", group.ErrInvalid)
	// ErrCeilingWithoutGuarantee: elastic memory is borrowed past a guarantee,
	// so a ceiling needs a memory limit on the GPUs.
	ErrCeilingWithoutGuarantee = fmt.Errorf("%w: an elastic memory ceiling needs a memory limit (the guarantee)", group.ErrInvalid)
	ErrSpillWithoutCeiling     = fmt.Errorf("%w: spill needs an elastic memory ceiling (only borrowed memory spills)", group.ErrInvalid)
)

// Settings is the one translation of a request into group settings.
func (r Request) Settings() (group.Settings, error) {
	var s group.Settings
	var err error
	if r.Priority != "" {
		if s.Priority, err = policy.ParsePriority(r.Priority); err != nil {
			return group.Settings{}, fmt.Errorf("%w: %w", group.ErrInvalid, err)
		}
	}
	for _, g := range r.GPUs {
		if g.Memory > 0 && (s.MemoryMax == 0 || g.Memory < s.MemoryMax) {
			s.MemoryMax = g.Memory
		}
		if f := UnitShare(g.Units, g.Total); f > 0 && (s.Share == 0 || f < s.Share) {
			s.Share = f
		}
	}
	if s.Share == 0 {
		s.Share = Round(r.Share)
	}
	if s.Share == 0 {
		s.Slice = r.Slice
	}
	s.ShareMax = Round(r.ShareMax)
	if err := r.elastic(&s); err != nil {
		return group.Settings{}, err
	}
	if err := s.Validate(); err != nil {
		return group.Settings{}, err
	}
	return s, nil
}

// elastic makes s's memory limit the guarantee under the request's ceiling.
func (r Request) elastic(s *group.Settings) error {
	switch {
	case r.Spill && r.MemoryCeiling == 0:
		return ErrSpillWithoutCeiling
	case r.MemoryCeiling == 0:
		return nil
	case s.MemoryMax == 0:
		return ErrCeilingWithoutGuarantee
	case r.MemoryCeiling < s.MemoryMax:
		return fmt.Errorf("%w: %s below %s", ErrCeilingBelowGuarantee, units.FormatSize(r.MemoryCeiling),
			units.FormatSize(s.MemoryMax))
	}
	s.MemoryMin, s.MemoryMax, s.MemorySpill = s.MemoryMax, r.MemoryCeiling, r.Spill
	return nil
}

// UnitShare is the share of a GPU's time that units of its total units are,
// as the share file holds it (Round); 0 for none, or for all of them (the
// whole GPU's time is no share).
func UnitShare(n, total int64) float64 {
	if n <= 0 || total <= 0 || n >= total {
		return 0
	}
	return Round(float64(n) / float64(total))
}

// Round is a share to a millionth, as the share file holds it (group.FormatPercent,
// group.ParseShare), so settings written and read back compare equal.
func Round(f float64) float64 {
	return math.Round(f*1e6) / 1e6
}
