// Package units parses and formats byte sizes such as "6GiB", "512MiB" or "1.5G".
package units

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrSize is wrapped by every parse error.
var ErrSize = errors.New("invalid size")

// multipliers maps a lower-cased unit suffix to its byte multiplier. Decimal SI
// suffixes (KB, MB, GB, TB) are powers of 1000; binary ones (KiB, Ki, K, ...) of 1024,
// as users of GPU memory usually mean.
func multiplier(unit string) (float64, bool) {
	switch strings.ToLower(unit) {
	case "", "b":
		return 1, true
	case "k", "ki", "kib":
		return 1 << 10, true
	case "m", "mi", "mib":
		return 1 << 20, true
	case "g", "gi", "gib":
		return 1 << 30, true
	case "t", "ti", "tib":
		return 1 << 40, true
	case "kb":
		return 1e3, true
	case "mb":
		return 1e6, true
	case "gb":
		return 1e9, true
	case "tb":
		return 1e12, true
	}
	return 0, false
}

// ParseSize parses a non-negative byte size: a decimal number and an optional
// unit (B, KiB, MiB, GiB, TiB, K, M, G, T, KB, MB, GB, TB). Fractions are
// allowed ("1.5GiB"); the result is rounded down to whole bytes.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" {
		return 0, fmt.Errorf("%w %q: want a number with an optional unit, e.g. 6GiB or 512MiB", ErrSize, s)
	}
	mult, ok := multiplier(unit)
	if !ok {
		return 0, fmt.Errorf("%w %q: unknown unit %q (use B, KiB, MiB, GiB, TiB or KB, MB, GB, TB)", ErrSize, s, unit)
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w %q: %w", ErrSize, s, err)
		}
		if mult != 1 && n > math.MaxUint64/uint64(mult) {
			return 0, fmt.Errorf("%w %q: too large", ErrSize, s)
		}
		return n * uint64(mult), nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%w %q: %w", ErrSize, s, err)
	}
	v := f * mult
	if v >= math.MaxUint64 || math.IsNaN(v) {
		return 0, fmt.Errorf("%w %q: too large", ErrSize, s)
	}
	return uint64(v), nil
}

// FormatSize renders n with a binary unit and one decimal, e.g. "5.8 GiB".
func FormatSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	suffixes := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v := float64(n) / unit
	i := 0
	for v >= unit && i < len(suffixes)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", v, suffixes[i])
}
