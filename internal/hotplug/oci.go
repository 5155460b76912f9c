package hotplug

import (
	"fmt"
	"strings"

	devconfig "github.com/opencontainers/cgroups/devices/config"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SpecDeviceRules turns a container's OCI device cgroup rules
// (linux.resources.devices, what the runtime turns into the v1 rules or the
// v2 program) into the library's rules: an absent type, major or minor means
// all, an absent access "rwm". Every rule is checked (CheckRule).
func SpecDeviceRules(spec *specs.Spec) ([]*devconfig.Rule, error) {
	if spec == nil || spec.Linux == nil || spec.Linux.Resources == nil {
		return nil, nil
	}
	out := make([]*devconfig.Rule, 0, len(spec.Linux.Resources.Devices))
	for i, d := range spec.Linux.Resources.Devices {
		r := &devconfig.Rule{Type: devconfig.WildcardDevice, Major: devconfig.Wildcard, Minor: devconfig.Wildcard,
			Permissions: "rwm", Allow: d.Allow}
		if d.Type != "" {
			if len(d.Type) != 1 {
				return nil, fmt.Errorf("%w: OCI device rule %d: type %q", ErrInvalidRule, i, d.Type)
			}
			r.Type = devconfig.Type(d.Type[0])
		}
		if d.Major != nil {
			r.Major = *d.Major
		}
		if d.Minor != nil {
			r.Minor = *d.Minor
		}
		if d.Access != "" {
			if strings.Trim(d.Access, "rwm") != "" {
				return nil, fmt.Errorf("%w: OCI device rule %d: access %q", ErrInvalidRule, i, d.Access)
			}
			r.Permissions = devconfig.Permissions(d.Access).Union("") // any order, canonical after
		}
		if err := CheckRule(*r); err != nil {
			return nil, fmt.Errorf("OCI device rule %d: %w", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// RuntimeDefaultRules are the device rules OCI runtimes add after a
// container's own (runc: libcontainer/specconv's AllowedDevices; the OCI
// runtime spec's default devices): mknod of any device, /dev/null, zero,
// full, random, urandom, tty, console, ptmx and the pseudo-terminals. The
// OCI config the runtime was given lacks them, yet the program the runtime
// attached on cgroup v2 allows them, so the program that replaces it must
// too. (On v1 they are read from devices.list.)
func RuntimeDefaultRules() []*devconfig.Rule {
	out := []*devconfig.Rule{
		{Type: devconfig.CharDevice, Major: devconfig.Wildcard, Minor: devconfig.Wildcard, Permissions: "m", Allow: true},
		{Type: devconfig.BlockDevice, Major: devconfig.Wildcard, Minor: devconfig.Wildcard, Permissions: "m", Allow: true},
		{Type: devconfig.CharDevice, Major: 136, Minor: devconfig.Wildcard, Permissions: "rwm", Allow: true},
	}
	for _, d := range [][2]int64{{1, 3}, {1, 5}, {1, 7}, {1, 8}, {1, 9}, {5, 0}, {5, 1}, {5, 2}} {
		out = append(out, &devconfig.Rule{Type: devconfig.CharDevice, Major: d[0], Minor: d[1], Permissions: "rwm", Allow: true})
	}
	return out
}
