package devices

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Emulator models one cgroup v1 devices controller: a default behaviour
// (allow or deny every device) and exceptions to it, changed by writes of
// rules to devices.allow and devices.deny exactly as the kernel does
// (security/device_cgroup.c): "a" resets, other rules add or remove access
// bits of the exception with the same type and numbers. The hierarchy (a
// child cannot allow what its parent denies) is not modelled.
type Emulator struct {
	defaultAllow bool
	exceptions   map[key]Perms
}

type key struct {
	t            Type
	major, minor int64
}

// NewEmulator returns a controller that allows (or denies) every device.
func NewEmulator(defaultAllow bool) *Emulator {
	return &Emulator{defaultAllow: defaultAllow, exceptions: map[key]Perms{}}
}

// FromRules applies rules in order to a controller that denies everything,
// the way runtimes (and the OCI spec) read a container's device list.
func FromRules(rules []Rule) (*Emulator, error) {
	e := NewEmulator(false)
	for _, r := range rules {
		if err := e.Apply(r); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// DefaultAllow reports the default behaviour.
func (e *Emulator) DefaultAllow() bool { return e.defaultAllow }

// Clone returns an independent copy of e.
func (e *Emulator) Clone() *Emulator {
	c := NewEmulator(e.defaultAllow)
	for k, p := range e.exceptions {
		c.exceptions[k] = p
	}
	return c
}

// Apply performs one write of r to devices.allow (r.Allow) or devices.deny.
func (e *Emulator) Apply(r Rule) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Type == TypeAll {
		e.defaultAllow = r.Allow
		clear(e.exceptions)
		return nil
	}
	k := key{r.Type, r.Major, r.Minor}
	// An exception to a deny-all default allows; to an allow-all default
	// it denies. A write of the exception's kind adds bits, the other
	// kind removes them (only from an exception with the same numbers).
	if r.Allow != e.defaultAllow {
		e.exceptions[k] |= r.Perms
	} else if left := e.exceptions[k] &^ r.Perms; left == 0 {
		delete(e.exceptions, k)
	} else {
		e.exceptions[k] = left
	}
	return nil
}

// Allows reports whether the controller lets a process access d with p, as
// the kernel decides it: with a deny-all default one exception must cover all
// of p; with an allow-all default no exception may overlap p.
func (e *Emulator) Allows(d Device, p Perms) bool {
	for k, ex := range e.exceptions {
		r := Rule{Type: k.t, Major: k.major, Minor: k.minor}
		if !r.Matches(d) {
			continue
		}
		if !e.defaultAllow && p&^ex == 0 {
			return true
		}
		if e.defaultAllow && p&ex != 0 {
			return false
		}
	}
	return e.defaultAllow
}

// Exceptions returns the exceptions as rules (Allow set when they allow), in
// a stable order.
func (e *Emulator) Exceptions() []Rule {
	out := make([]Rule, 0, len(e.exceptions))
	for k, p := range e.exceptions {
		out = append(out, Rule{Type: k.t, Major: k.major, Minor: k.minor, Perms: p, Allow: !e.defaultAllow})
	}
	slices.SortFunc(out, func(a, b Rule) int {
		return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Major, b.Major), cmp.Compare(a.Minor, b.Minor))
	})
	return out
}

// Equal reports whether e and o behave the same.
func (e *Emulator) Equal(o *Emulator) bool {
	if e.defaultAllow != o.defaultAllow || len(e.exceptions) != len(o.exceptions) {
		return false
	}
	for k, p := range e.exceptions {
		if o.exceptions[k] != p {
			return false
		}
	}
	return true
}

// List renders devices.list as the kernel does: "a *:* rwm" for an
// allow-all default (its exceptions are not shown), else one line per
// exception.
func (e *Emulator) List() string {
	if e.defaultAllow {
		return "a *:* rwm\n"
	}
	var b strings.Builder
	for _, r := range e.Exceptions() {
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// ParseList reads devices.list. known is false when the list says "a *:*
// rwm": the default allows everything and the exceptions are not shown.
func ParseList(s string) (e *Emulator, known bool, err error) {
	e = NewEmulator(false)
	for i, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		r, err := ParseRule(line, true)
		if err != nil {
			return nil, false, fmt.Errorf("devices.list line %d: %w", i+1, err)
		}
		if r.Type == TypeAll {
			if r.Major != Wildcard || r.Minor != Wildcard || r.Perms != PermsAll {
				return nil, false, fmt.Errorf("%w: devices.list line %d: %q", ErrInvalidRule, i+1, line)
			}
			if len(e.exceptions) > 0 {
				return nil, false, fmt.Errorf("%w: devices.list line %d: allow-all after exceptions", ErrInvalidRule, i+1)
			}
			e.defaultAllow = true
			continue
		}
		if e.defaultAllow {
			return nil, false, fmt.Errorf("%w: devices.list line %d: exception after allow-all", ErrInvalidRule, i+1)
		}
		if err := e.Apply(r); err != nil {
			return nil, false, err
		}
	}
	return e, !e.defaultAllow, nil
}
