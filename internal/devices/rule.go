// Package devices is pure logic about Linux device access rules: the rule set
// a container should have, an emulator of the cgroup v1 devices controller
// (what devices.list shows, what a state allows, the target state of a
// change), and the builder of the cgroup v2 eBPF device program that enforces
// the same state. It performs no system calls; internal/hotplug applies its
// results. The writes that take a v1 cgroup from one state to another are
// opencontainers/cgroups' v1 device setter; its emulator is not exported, so
// reading devices.list, the kernel's access checks and the refusals stay here.
package devices

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalidRule wraps every rule parsing or validation failure.
var ErrInvalidRule = errors.New("invalid device rule")

// Type is a device type as the devices controller writes it.
type Type byte

// Device types. TypeAll only appears in rules ("a": every device).
const (
	TypeAll   Type = 'a'
	TypeChar  Type = 'c'
	TypeBlock Type = 'b'
)

// Wildcard is a major or minor number that matches every number ("*").
const Wildcard int64 = -1

// Perms is a set of access kinds. The bit values are the kernel's
// BPF_DEVCG_ACC_* values, so the eBPF program uses them unchanged.
type Perms uint8

// Access kinds.
const (
	Mknod Perms = 1 << iota
	Read
	Write
	// PermsAll is "rwm".
	PermsAll = Read | Write | Mknod
)

// ParsePerms reads an access string made of r, w and m (at least one).
func ParsePerms(s string) (Perms, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty access", ErrInvalidRule)
	}
	var p Perms
	for _, c := range s {
		var b Perms
		switch c {
		case 'r':
			b = Read
		case 'w':
			b = Write
		case 'm':
			b = Mknod
		default:
			return 0, fmt.Errorf("%w: access %q: unknown %q", ErrInvalidRule, s, c)
		}
		if p&b != 0 {
			return 0, fmt.Errorf("%w: access %q: %q repeated", ErrInvalidRule, s, c)
		}
		p |= b
	}
	return p, nil
}

// String writes p in the kernel's order ("rwm").
func (p Perms) String() string {
	var b strings.Builder
	for _, x := range []struct {
		bit Perms
		c   byte
	}{{Read, 'r'}, {Write, 'w'}, {Mknod, 'm'}} {
		if p&x.bit != 0 {
			b.WriteByte(x.c)
		}
	}
	return b.String()
}

// Device is one device node's identity.
type Device struct {
	Type  Type
	Major uint32
	Minor uint32
}

func (d Device) String() string { return fmt.Sprintf("%c %d:%d", d.Type, d.Major, d.Minor) }

// Rule allows or denies access to the devices it matches. Major and Minor
// are Wildcard or 0..2^32-2.
type Rule struct {
	Type  Type
	Major int64
	Minor int64
	Perms Perms
	Allow bool
}

// DeviceRule is the rule that allows (or denies) perms on exactly d.
func DeviceRule(d Device, perms Perms, allow bool) Rule {
	return Rule{Type: d.Type, Major: int64(d.Major), Minor: int64(d.Minor), Perms: perms, Allow: allow}
}

// Validate checks r.
func (r Rule) Validate() error {
	switch r.Type {
	case TypeAll, TypeChar, TypeBlock:
	default:
		return fmt.Errorf("%w: type %q", ErrInvalidRule, r.Type)
	}
	for _, n := range []int64{r.Major, r.Minor} {
		if n != Wildcard && (n < 0 || n >= 1<<32-1) {
			return fmt.Errorf("%w: number %d out of range", ErrInvalidRule, n)
		}
	}
	if r.Perms == 0 || r.Perms&^PermsAll != 0 {
		return fmt.Errorf("%w: access bits %#x", ErrInvalidRule, uint8(r.Perms))
	}
	return nil
}

// Matches reports whether r names device d (type and numbers; access apart).
func (r Rule) Matches(d Device) bool {
	return (r.Type == TypeAll || r.Type == d.Type) &&
		(r.Major == Wildcard || r.Major == int64(d.Major)) &&
		(r.Minor == Wildcard || r.Minor == int64(d.Minor))
}

// String writes r as a line of devices.list / devices.allow ("c 195:0 rw").
func (r Rule) String() string {
	num := func(n int64) string {
		if n == Wildcard {
			return "*"
		}
		return strconv.FormatInt(n, 10)
	}
	return fmt.Sprintf("%c %s:%s %s", r.Type, num(r.Major), num(r.Minor), r.Perms)
}

// ParseRule reads one line in the devices controller's format
// ("c 195:0 rw", "a *:* rwm", "b 8:* m"); allow says which file it is for.
// "a" alone is accepted and means "a *:* rwm", as the kernel reads it.
func ParseRule(line string, allow bool) (Rule, error) {
	f := strings.Fields(line)
	if len(f) == 1 && f[0] == "a" {
		return Rule{Type: TypeAll, Major: Wildcard, Minor: Wildcard, Perms: PermsAll, Allow: allow}, nil
	}
	if len(f) != 3 || len(f[0]) != 1 {
		return Rule{}, fmt.Errorf("%w: %q: want \"TYPE MAJOR:MINOR ACCESS\"", ErrInvalidRule, line)
	}
	r := Rule{Type: Type(f[0][0]), Allow: allow}
	maj, min, ok := strings.Cut(f[1], ":")
	if !ok {
		return Rule{}, fmt.Errorf("%w: %q: numbers %q lack ':'", ErrInvalidRule, line, f[1])
	}
	var err error
	if r.Major, err = parseNumber(maj); err != nil {
		return Rule{}, fmt.Errorf("%w: %q: major: %w", ErrInvalidRule, line, err)
	}
	if r.Minor, err = parseNumber(min); err != nil {
		return Rule{}, fmt.Errorf("%w: %q: minor: %w", ErrInvalidRule, line, err)
	}
	if r.Perms, err = ParsePerms(f[2]); err != nil {
		return Rule{}, fmt.Errorf("%q: %w", line, err)
	}
	if err := r.Validate(); err != nil {
		return Rule{}, fmt.Errorf("%q: %w", line, err)
	}
	return r, nil
}

func parseNumber(s string) (int64, error) {
	if s == "*" {
		return Wildcard, nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, fmt.Errorf("%q is not * or a number below 2^32-1", s)
	}
	return int64(n), nil
}
