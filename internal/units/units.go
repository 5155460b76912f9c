// Package units parses and formats byte sizes. Parsing follows Kubernetes
// quantities (k8s.io/apimachinery resource.Quantity), as pod specs do.
package units

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// ErrSize is wrapped by every parse error.
var ErrSize = errors.New("invalid size")

// maxLen bounds what is parsed (and quoted in errors): sizes come from flags,
// files and annotations, which are untrusted.
const maxLen = 64

// byteSuffix maps the spellings people write for bytes onto Kubernetes quantity
// suffixes: "GiB" is "Gi" (2^30), "GB" is "G" (10^9), "B" is bytes. Sizes mean
// what they mean in a pod spec: "10G" is 10^9 bytes and "10Gi" is 2^30 x 10.
func byteSuffix(s string) string {
	u := strings.ToUpper(s)
	switch {
	case strings.HasSuffix(u, "IB") && len(s) >= 3:
		return s[:len(s)-3] + strings.ToUpper(s[len(s)-3:len(s)-2]) + "i"
	case strings.HasSuffix(u, "KB"):
		return s[:len(s)-2] + "k"
	case strings.HasSuffix(u, "B") && len(s) >= 2 && strings.ContainsAny(u[len(u)-2:len(u)-1], "MGTPE"):
		return s[:len(s)-2] + u[len(u)-2:len(u)-1]
	case strings.HasSuffix(u, "B"):
		return s[:len(s)-1]
	}
	return s
}

// ParseSize parses a non-negative byte size as a Kubernetes quantity ("6Gi",
// "512Mi", "10G" = 10^9, "1.5Gi", "1e9"), also accepting the byte spellings
// "6GiB", "512MiB", "10GB" and "100B". Fractional bytes are refused.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	if len(t) > maxLen {
		return 0, fmt.Errorf("%w %q...: longer than %d characters", ErrSize, t[:16], maxLen)
	}
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if t == "" || i == 0 {
		return 0, fmt.Errorf("%w %q: want a Kubernetes quantity, e.g. 6Gi, 512Mi or 10G (10^9)", ErrSize, s)
	}
	if i > 0 { // "2 TiB": one number, then its unit
		t = t[:i] + strings.TrimLeft(t[i:], " ")
	}
	q, err := resource.ParseQuantity(byteSuffix(t))
	if err != nil {
		return 0, fmt.Errorf("%w %q: want a Kubernetes quantity, e.g. 6Gi, 512Mi or 10G (10^9): %w", ErrSize, s, err)
	}
	if q.Sign() < 0 {
		return 0, fmt.Errorf("%w %q: negative", ErrSize, s)
	}
	if q.AsApproximateFloat64() >= math.MaxInt64 {
		return 0, fmt.Errorf("%w %q: too large", ErrSize, s)
	}
	n, exact := q.AsInt64()
	if !exact {
		v, ok := wholeBytes(q)
		if !ok {
			return 0, fmt.Errorf("%w %q: not a whole number of bytes", ErrSize, s)
		}
		n = v
	}
	return uint64(n), nil
}

// wholeBytes is q's exact value when it is a whole number that fits an
// int64 (q is known to be below 2^63: MilliValue would overflow here).
func wholeBytes(q resource.Quantity) (int64, bool) {
	d := q.AsDec()
	v := new(big.Int).Set(d.UnscaledBig())
	scale := int64(d.Scale())
	ten := big.NewInt(10)
	if scale < 0 {
		v.Mul(v, new(big.Int).Exp(ten, big.NewInt(-scale), nil))
	} else if scale > 0 {
		var rem big.Int
		v.QuoRem(v, new(big.Int).Exp(ten, big.NewInt(scale), nil), &rem)
		if rem.Sign() != 0 {
			return 0, false
		}
	}
	if !v.IsInt64() || v.Sign() < 0 {
		return 0, false
	}
	return v.Int64(), true
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
