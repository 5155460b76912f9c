// Package group is the operator's interface to process groups: a cgroup-like
// file tree, one directory per group under <run dir>/groups/<name>/, with
// writable settings (memory.max, slice, share, share.max, priority) and read-back files the
// time-slice daemon keeps current (memory.current, gpu_time.achieved, burst.banked).
// See docs/timeslice.md.
package group

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/internal/units"
)

// The writable setting files.
const (
	FileMemoryMax   = "memory.max"
	FileMemoryMin   = "memory.min"
	FileMemorySpill = "memory.spill"
	FileSlice       = "slice"
	FileShare       = "share"
	FileShareMax    = "share.max"
	FilePriority    = "priority"
)

// The read-back files written by the time-slice daemon.
const (
	FileMemoryCurrent = "memory.current"
	FileMemoryElastic = "memory.elastic"
	FileAchieved      = "gpu_time.achieved"
	FileBanked        = "burst.banked"
)

// The generation files: a writer of settings (internal/groupmgr) numbers
// each change in FileGeneration after writing it; the time-slice daemon, once it has
// applied the settings it read after that number, writes the number into
// FileApplied (read-back). docs/timeslice.md, "Generations".
const (
	FileGeneration = "settings.generation"
	FileApplied    = "settings.applied"
)

// FileGPUs lists the whole GPUs a group holds, one UUID a line (written by
// internal/groupmgr, which defines its format).
const FileGPUs = "gpus"

// FileGateOff in a group's directory is the node's word that its launches are
// ungated (MPS clients); the library reads it where the group is a container's.
const FileGateOff = "gate-off"

// SettingFiles lists the writable files in a fixed order.
func SettingFiles() []string {
	return []string{FileMemoryMax, FileMemoryMin, FileMemorySpill, FileSlice, FileShare, FileShareMax, FilePriority}
}

// ReadbackFiles lists the read-back files.
func ReadbackFiles() []string {
	return []string{FileMemoryCurrent, FileMemoryElastic, FileAchieved, FileBanked}
}

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid setting")

// Settings are one group's writable settings. Zero values mean "default".
type Settings struct {
	MemoryMax uint64 // bytes per GPU; 0 = no limit ("max"); with MemoryMin, the ceiling
	// MemoryMin is the guarantee per GPU (elastic memory): allocations up to it
	// never wait for anyone, past it up to MemoryMax are borrowed from the node
	// daemon. 0: no elastic memory (MemoryMax is a plain limit).
	MemoryMin   uint64
	MemorySpill bool // borrowed memory may move to host memory ("host"; default "none")
	Slice       time.Duration
	Share       float64 // fraction of the period, (0, 1]
	// ShareMax is the ceiling on the group's share of the GPU's time, even
	// alone on it, a fraction in [1%, 100%]; 0: none (work-conserving).
	ShareMax float64
	Priority policy.Priority
}

// Params converts the settings to policy params.
func (s Settings) Params() policy.Params {
	return policy.Params{Slice: s.Slice, Share: s.Share, Priority: s.Priority, ShareMax: s.ShareMax}
}

// Validate checks the combination.
func (s Settings) Validate() error {
	if err := s.Params().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if s.MemoryMax != 0 && s.MemoryMin > s.MemoryMax {
		return fmt.Errorf("%w: memory.min %s is above memory.max %s", ErrInvalid, units.FormatSize(s.MemoryMin),
			units.FormatSize(s.MemoryMax))
	}
	return nil
}

// Elastic reports whether the group borrows past a guarantee.
func (s Settings) Elastic() bool {
	return s.MemoryMin != 0 && (s.MemoryMax == 0 || s.MemoryMax > s.MemoryMin)
}

// Format renders one setting the way its file holds it.
func (s Settings) Format(file string) (string, error) {
	switch file {
	case FileMemoryMax:
		if s.MemoryMax == 0 {
			return "max", nil
		}
		return strconv.FormatUint(s.MemoryMax, 10), nil
	case FileMemoryMin:
		return strconv.FormatUint(s.MemoryMin, 10), nil
	case FileMemorySpill:
		if s.MemorySpill {
			return "host", nil
		}
		return "none", nil
	case FileSlice:
		if s.Slice == 0 {
			return "default", nil
		}
		return s.Slice.String(), nil
	case FileShare:
		if s.Share == 0 {
			return "default", nil
		}
		return FormatPercent(s.Share), nil
	case FileShareMax:
		if s.ShareMax == 0 {
			return "none", nil
		}
		return FormatPercent(s.ShareMax), nil
	case FilePriority:
		return s.Priority.String(), nil
	}
	return "", fmt.Errorf("%w: unknown setting %q (want one of %s)", ErrInvalid, file, strings.Join(SettingFiles(), ", "))
}

// Apply parses value into the setting named file; s is unchanged on error.
// Setting a slice clears the share and vice versa (a group has one or the other).
func (s *Settings) Apply(file, value string) error {
	v := strings.TrimSpace(value)
	if _, ferr := s.Format(file); ferr != nil {
		return ferr
	}
	if err := checkLen(file, v); err != nil {
		return err
	}
	n := *s
	var err error
	switch file {
	case FileMemoryMax:
		n.MemoryMax, err = parseMemory(v)
	case FileMemoryMin:
		n.MemoryMin, err = parseMin(v)
	case FileMemorySpill:
		n.MemorySpill, err = ParseSpill(v)
	case FileSlice:
		n.Slice, err = ParseSlice(v)
		if n.Slice != 0 {
			n.Share = 0
		}
	case FileShare:
		n.Share, err = ParseShare(v)
		if n.Share != 0 {
			n.Slice = 0
		}
	case FileShareMax:
		n.ShareMax, err = ParseShareMax(v)
	case FilePriority:
		n.Priority, err = policy.ParsePriority(v)
	default:
		_, err = s.Format(file)
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, file, err)
	}
	if err := n.Validate(); err != nil {
		return err
	}
	*s = n
	return nil
}

func parseMemory(v string) (uint64, error) {
	if v == "max" || v == "" {
		return 0, nil
	}
	n, err := units.ParseSize(v)
	if err != nil {
		return 0, fmt.Errorf("want bytes, a size such as 6GiB, or max: %w", err)
	}
	if n == 0 {
		return 0, errors.New("a zero limit would refuse every allocation; use max for no limit")
	}
	return n, nil
}

func parseMin(v string) (uint64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := units.ParseSize(v)
	if err != nil {
		return 0, fmt.Errorf("want bytes or a size such as 6GiB (0: no guarantee): %w", err)
	}
	return n, nil
}

// ParseSpill parses memory.spill: "host" (borrowed memory may move to host
// memory) or "none".
func ParseSpill(v string) (bool, error) {
	switch v {
	case "host":
		return true, nil
	case "none", "":
		return false, nil
	}
	return false, fmt.Errorf("%q: want host or none", v)
}

// ParseSlice parses a slice length: a duration such as "20ms" or "200us", a
// plain number of microseconds, or "default".
func ParseSlice(v string) (time.Duration, error) {
	if v == "default" || v == "" {
		return 0, nil
	}
	var d time.Duration
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		d = time.Duration(n) * time.Microsecond
	} else if d, err = time.ParseDuration(v); err != nil {
		return 0, fmt.Errorf("invalid duration %q: want e.g. 20ms, 200us, or default", v)
	}
	if d < 100*time.Microsecond || d > policy.MaxSlice {
		return 0, fmt.Errorf("slice %v out of range [100µs, %v]", d, policy.MaxSlice)
	}
	return d, nil
}

// ParseShare parses a share of the period: a percentage ("30%"), a fraction
// ("0.3"), or "default".
func ParseShare(v string) (float64, error) {
	if v == "default" || v == "" {
		return 0, nil
	}
	num, pct := strings.CutSuffix(v, "%")
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("invalid share %q: want a percentage such as 30%%", v)
	}
	switch {
	case pct:
		f /= 100
	case f > 1:
		return 0, fmt.Errorf("share %q: write a percentage (30%%) or a fraction (0.3)", v)
	}
	if f <= 0 || f > 1 {
		return 0, fmt.Errorf("share %q out of range (0%%, 100%%]", v)
	}
	// To a millionth (what Format writes): "1.12%" reads as 112/10000 does,
	// so a value written and read back compares equal.
	r := math.Round(f*1e6) / 1e6
	if r <= 0 {
		return 0, fmt.Errorf("share %q below 0.0001%%", v)
	}
	return r, nil
}

// ParseShareMax parses a share ceiling: a percentage ("40%") or a fraction
// ("0.4") of at least 1%, or "none" (also "max", "default" or empty) for no
// ceiling.
func ParseShareMax(v string) (float64, error) {
	switch v {
	case "none", "max", "default", "":
		return 0, nil
	}
	f, err := ParseShare(v)
	if err != nil {
		return 0, err
	}
	if f < policy.MinShareMax {
		return 0, fmt.Errorf("share ceiling %q below %g%%", v, policy.MinShareMax*100)
	}
	return f, nil
}

// FormatPercent renders a fraction as a percentage ("40%"), to 4 decimals.
func FormatPercent(f float64) string {
	return strconv.FormatFloat(math.Round(f*1e6)/1e4, 'f', -1, 64) + "%"
}
