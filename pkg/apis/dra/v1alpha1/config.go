package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
)

// MaxConfigBytes bounds the configuration decoded (the API server limits
// opaque parameters to 10 KiB; an annotation is untrusted too).
const MaxConfigBytes = 10 * 1024

// ShareConfigAnnotation on a ResourceClaim holds a GPUShareConfig (JSON) that
// replaces the claim's configuration while it runs: the node applies a
// change to its group at once, without restarting its pods.
const ShareConfigAnnotation = "gpuslice.io/share-config"

// Slice bounds (those of the time-slice daemon).
const (
	MinSlice = 100 * time.Microsecond
	MaxSlice = 10 * time.Second
)

// ErrInvalid is wrapped by every decoding and validation error.
var ErrInvalid = errors.New("invalid GPUShareConfig")

// Decode reads one GPUShareConfig strictly: apiVersion gpuslice.io/v1alpha1
// and kind GPUShareConfig, no unknown, duplicate or case-mismatched fields,
// nothing after the object, at most MaxConfigBytes. The result is not
// defaulted or validated (Default, Validate).
func Decode(raw []byte) (*GPUShareConfig, error) {
	if len(raw) > MaxConfigBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrInvalid, len(raw), MaxConfigBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var one json.RawMessage
	if err := dec.Decode(&one); err != nil {
		return nil, fmt.Errorf("%w: JSON: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalid)
	}
	var c GPUShareConfig
	strict, err := sigsjson.UnmarshalStrict(one, &c, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("%w: JSON: %w", ErrInvalid, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(strict...))
	}
	if c.APIVersion != SchemeGroupVersion.String() || c.Kind != GPUShareConfigKind {
		return nil, fmt.Errorf("%w: apiVersion %q kind %q: want apiVersion %s kind %s", ErrInvalid,
			clip(c.APIVersion), clip(c.Kind), SchemeGroupVersion, GPUShareConfigKind)
	}
	return &c, nil
}

// clip bounds a string quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// DefaultConfig is the configuration of a claim that carries none.
func DefaultConfig() *GPUShareConfig {
	c := &GPUShareConfig{}
	c.APIVersion, c.Kind = SchemeGroupVersion.String(), GPUShareConfigKind
	c.Default()
	return c
}

// Default fills in the defaults: priority low.
func (c *GPUShareConfig) Default() {
	if c.Priority == "" {
		c.Priority = PriorityLow
	}
}

// Validate checks each field on its own; the errors name the field
// (e.g. "shareCeiling: Invalid value: 0: ...").
func (c *GPUShareConfig) Validate() error {
	var errs field.ErrorList
	switch c.Priority {
	case PriorityHigh, PriorityLow:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("priority"), clip(c.Priority), []string{PriorityHigh, PriorityLow}))
	}
	if c.Slice != nil && (c.Slice.Duration < MinSlice || c.Slice.Duration > MaxSlice) {
		errs = append(errs, field.Invalid(field.NewPath("slice"), c.Slice.Duration.String(),
			fmt.Sprintf("must be between %v and %v", MinSlice, MaxSlice)))
	}
	if c.ShareCeiling != nil && (*c.ShareCeiling < 1 || *c.ShareCeiling > 100) {
		errs = append(errs, field.Invalid(field.NewPath("shareCeiling"), *c.ShareCeiling, "a percentage of the GPU's time, 1 to 100"))
	}
	if m := c.MemoryCeiling; m != nil {
		if _, exact := m.AsInt64(); !exact || m.Sign() <= 0 {
			errs = append(errs, field.Invalid(field.NewPath("memoryCeiling"), clip(m.String()), "a positive whole number of bytes, such as 20Gi"))
		}
	}
	if c.Spill && c.MemoryCeiling == nil {
		errs = append(errs, field.Invalid(field.NewPath("spill"), true, "needs memoryCeiling (only borrowed memory spills)"))
	}
	if err := errs.ToAggregate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Claim is what a configuration is checked against at Prepare: the least
// memory (bytes per GPU) the claim consumes on its GPUs, and
// whether it holds a share (a units request) rather than whole GPUs.
//
// +kubebuilder:object:generate=false
type Claim struct {
	Memory int64
	Share  bool
}

// ValidateFor checks the configuration against the claim it configures:
// a slice only for whole GPUs, a memory ceiling at least the claim's memory.
func (c *GPUShareConfig) ValidateFor(cl Claim) error {
	if err := c.Validate(); err != nil {
		return err
	}
	var errs field.ErrorList
	if c.Slice != nil && cl.Share {
		errs = append(errs, field.Forbidden(field.NewPath("slice"),
			"a share of a GPU gets its time from its units; a slice is for whole GPUs"))
	}
	if m := c.MemoryCeiling; m != nil {
		switch n, _ := m.AsInt64(); {
		case cl.Memory == 0:
			errs = append(errs, field.Forbidden(field.NewPath("memoryCeiling"),
				"elastic memory needs a memory request in the claim (its guarantee)"))
		case n < cl.Memory:
			errs = append(errs, field.Invalid(field.NewPath("memoryCeiling"), m.String(),
				"below the claim's memory "+resource.NewQuantity(cl.Memory, resource.BinarySI).String()))
		}
	}
	if err := errs.ToAggregate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}
