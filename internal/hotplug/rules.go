package hotplug

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	devconfig "github.com/opencontainers/cgroups/devices/config"
)

// ErrInvalidRule wraps a device rule (or devices.list line) that is not
// well formed.
var ErrInvalidRule = errors.New("invalid device rule")

// maxNumber is the largest device major or minor number (2^32-2; 2^32-1 is
// the kernel's "any").
const maxNumber = 1<<32 - 2

// CheckRule validates a rule the way the kernel's devices controller would
// accept it: type a, b or c; numbers Wildcard or 0..2^32-2; access a
// non-empty, repetition-free combination of r, w and m.
func CheckRule(r devconfig.Rule) error {
	if !r.Type.CanCgroup() {
		return fmt.Errorf("%w: type %q", ErrInvalidRule, r.Type)
	}
	for _, n := range []int64{r.Major, r.Minor} {
		if n != devconfig.Wildcard && (n < 0 || n > maxNumber) {
			return fmt.Errorf("%w: number %d out of range", ErrInvalidRule, n)
		}
	}
	if r.Permissions.IsEmpty() || !r.Permissions.IsValid() {
		return fmt.Errorf("%w: access %q", ErrInvalidRule, r.Permissions)
	}
	return nil
}

// ParseDevicesList reads a cgroup v1 devices.list: the allow exceptions of a
// cgroup that denies everything else, one "TYPE MAJOR:MINOR ACCESS" line
// each, or the single line "a *:* rwm" of a cgroup that allows everything
// (allowAll; its deny exceptions are not shown by the kernel). Anything else
// is an error. opencontainers/cgroups reads this file in its v1 setter but
// does not export the parser.
func ParseDevicesList(s string) (rules []*devconfig.Rule, allowAll bool, err error) {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if s == "" {
		return nil, false, nil
	}
	for i, line := range lines {
		r, err := parseListLine(line)
		if err != nil {
			return nil, false, fmt.Errorf("devices.list line %d: %w", i+1, err)
		}
		if r.Type == devconfig.WildcardDevice {
			if len(lines) != 1 || r.Major != devconfig.Wildcard || r.Minor != devconfig.Wildcard || r.Permissions != "rwm" {
				return nil, false, fmt.Errorf("%w: devices.list line %d: %q besides other lines", ErrInvalidRule, i+1, line)
			}
			return nil, true, nil
		}
		rules = append(rules, r)
	}
	return rules, false, nil
}

// parseListLine reads "c 195:0 rw" strictly (single spaces, canonical access
// order, as the kernel prints it) into an allow rule.
func parseListLine(line string) (*devconfig.Rule, error) {
	f := strings.Split(line, " ")
	if len(f) != 3 || len(f[0]) != 1 {
		return nil, fmt.Errorf("%w: %q: want \"TYPE MAJOR:MINOR ACCESS\"", ErrInvalidRule, line)
	}
	maj, min, ok := strings.Cut(f[1], ":")
	if !ok {
		return nil, fmt.Errorf("%w: %q: numbers lack ':'", ErrInvalidRule, line)
	}
	r := &devconfig.Rule{Type: devconfig.Type(f[0][0]), Permissions: devconfig.Permissions(f[2]), Allow: true}
	var err error
	if r.Major, err = parseNumber(maj); err != nil {
		return nil, fmt.Errorf("%w: %q: major: %w", ErrInvalidRule, line, err)
	}
	if r.Minor, err = parseNumber(min); err != nil {
		return nil, fmt.Errorf("%w: %q: minor: %w", ErrInvalidRule, line, err)
	}
	if err := CheckRule(*r); err != nil {
		return nil, fmt.Errorf("%q: %w", line, err)
	}
	return r, nil
}

func parseNumber(s string) (int64, error) {
	if s == "*" {
		return devconfig.Wildcard, nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > maxNumber || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("%q is not * or a number below 2^32-1", s)
	}
	return int64(n), nil
}

// AllowsAll reports whether rules, applied in order to a cgroup that denies
// everything, leave it allowing every device not excepted: the last rule of
// type a decides (a privileged container's device list).
func AllowsAll(rules []*devconfig.Rule) bool {
	all := false
	for _, r := range rules {
		if r.Type == devconfig.WildcardDevice {
			all = r.Allow
		}
	}
	return all
}

// Target is the device rule list that gives a container exactly the wanted
// managed devices: its own rules (base), then each managed device's access
// denied, then the wanted ones (by Path) allowed. The access of a managed
// device is its Permissions (e.g. "rw"); its denial takes the same bits
// only, so a runtime's "c *:* m" wildcard is never split (the library refuses
// to punch holes in a wildcard, as the kernel cannot).
func Target(base []*devconfig.Rule, managed []devconfig.Device, want map[string]bool) []*devconfig.Rule {
	out := make([]*devconfig.Rule, 0, len(base)+2*len(managed))
	out = append(out, base...)
	for _, d := range managed {
		out = append(out, &devconfig.Rule{Type: d.Type, Major: d.Major, Minor: d.Minor, Permissions: d.Permissions})
	}
	for _, d := range managed {
		if want[d.Path] {
			out = append(out, &devconfig.Rule{Type: d.Type, Major: d.Major, Minor: d.Minor, Permissions: d.Permissions, Allow: true})
		}
	}
	return out
}

// ruleList renders rules one per line ("allow c 195:0 rw"), for keys and
// messages.
func ruleList(rules []*devconfig.Rule) string {
	var b strings.Builder
	for _, r := range rules {
		if r.Allow {
			b.WriteString("allow ")
		} else {
			b.WriteString("deny ")
		}
		b.WriteString(r.CgroupString())
		b.WriteByte('\n')
	}
	return b.String()
}
