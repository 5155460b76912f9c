package hotplug

import (
	"encoding/json"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpuslice/gpuslice/internal/devices"
)

// OCIDeviceRules reads a container's device cgroup rules from its OCI
// runtime config (linux.resources.devices, what runc turns into the v1 rules
// or the v2 program): an absent type, major or minor means all, an absent
// access "rwm".
func OCIDeviceRules(configJSON []byte) ([]devices.Rule, error) {
	var c specs.Spec
	if err := json.Unmarshal(configJSON, &c); err != nil {
		return nil, fmt.Errorf("OCI config: %w", err)
	}
	if c.Linux == nil || c.Linux.Resources == nil {
		return nil, nil
	}
	var out []devices.Rule
	for i, d := range c.Linux.Resources.Devices {
		r := devices.Rule{Type: devices.TypeAll, Major: devices.Wildcard, Minor: devices.Wildcard, Perms: devices.PermsAll, Allow: d.Allow}
		if d.Type != "" {
			if len(d.Type) != 1 {
				return nil, fmt.Errorf("%w: OCI device rule %d: type %q", devices.ErrInvalidRule, i, d.Type)
			}
			r.Type = devices.Type(d.Type[0])
		}
		if d.Major != nil {
			r.Major = *d.Major
		}
		if d.Minor != nil {
			r.Minor = *d.Minor
		}
		if d.Access != "" {
			p, err := devices.ParsePerms(d.Access)
			if err != nil {
				return nil, fmt.Errorf("OCI device rule %d: %w", i, err)
			}
			r.Perms = p
		}
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("OCI device rule %d: %w", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}
