package api

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The per-pod share ceiling: at most this share of each GPU's time for every
// container of the pod, even alone on the GPU (the time-slice daemon's share.max).
// The scheduler books units as before; the ceiling only holds the node back.
const (
	// AnnotationShareMax: the ceiling as a percentage ("40%", up to two
	// decimals) or in units ("40", units of one GPU's time), 1 to 100.
	AnnotationShareMax = Group + "/share-max"
	// ReasonShareMaxInvalid (Warning, from the node agent): a malformed
	// AnnotationShareMax; it is ignored and the pod's groups keep the
	// ceiling they had (none at first).
	ReasonShareMaxInvalid = "GPUShareMaxInvalid"
)

// ErrInvalidShareMax wraps a malformed AnnotationShareMax.
var ErrInvalidShareMax = errors.New("invalid gpuslice share ceiling")

// ParseShareMax reads a pod's AnnotationShareMax as a fraction of a GPU in
// [0.01, 1]; 0 when absent. Strict: "40%" or "12.5%" (a decimal without sign,
// leading zeros or exponent, at most two decimals), or units "40" (a decimal
// 1..DefaultUnitsPerGPU); nothing else, no whitespace.
func ParseShareMax(pod *corev1.Pod) (float64, error) {
	v, ok := pod.Annotations[AnnotationShareMax]
	if !ok {
		return 0, nil
	}
	f, err := parseShareMax(v)
	if err != nil {
		return 0, fmt.Errorf("%w: %s=%q: want a percentage such as 40%% or units 1..%d: %w", ErrInvalidShareMax,
			AnnotationShareMax, clip(v), DefaultUnitsPerGPU, err)
	}
	return f, nil
}

func parseShareMax(v string) (float64, error) {
	num, pct := strings.CutSuffix(v, "%")
	whole, frac, dot := strings.Cut(num, ".")
	if !decimal(whole) || dot && (!pct || len(frac) == 0 || len(frac) > 2 || !digits(frac)) {
		return 0, errors.New("not a plain decimal")
	}
	// In hundredths of a percent (units are hundredths of a GPU: the same
	// number as a percentage).
	h, err := strconv.ParseInt(whole+frac+strings.Repeat("0", 2-len(frac)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a plain decimal: %w", err)
	}
	if h < 100 || h > 100*100 {
		return 0, errors.New("out of range")
	}
	return float64(h) / (100 * 100), nil
}

// decimal: digits without a leading zero (or "0" itself).
func decimal(s string) bool {
	return digits(s) && len(s) <= 3 && (s == "0" || s[0] != '0')
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
