package hotplug

import (
	"errors"
	"fmt"

	"github.com/moby/sys/userns"
	"github.com/opencontainers/cgroups"

	// Registers the library's device setters (cgroups.DevicesSetV1/V2).
	_ "github.com/opencontainers/cgroups/devices"
	devconfig "github.com/opencontainers/cgroups/devices/config"
)

// ErrUnrestricted wraps a device cgroup that allows every device (a
// privileged container): access cannot be narrowed to the assignment.
var ErrUnrestricted = errors.New("device cgroup allows every device")

// SyncV1 makes the managed devices of a cgroup v1 devices directory allowed
// exactly when wanted (by Path), leaving every other rule as it is: the
// target is the kernel's current exceptions (devices.list) followed by
// Target's denials and allows, and opencontainers/cgroups' v1 device setter
// writes the difference (removals first) and checks devices.list after. A
// device a wildcard rule allows cannot be denied (the setter refuses to
// punch a hole). changed reports whether devices.list changed.
func SyncV1(dir string, managed []devconfig.Device, want map[string]bool) (changed bool, err error) {
	before, err := cgroups.ReadFile(dir, "devices.list")
	if err != nil {
		return false, fmt.Errorf("read device cgroup: %w", err)
	}
	cur, allowAll, err := ParseDevicesList(before)
	if err != nil {
		return false, fmt.Errorf("%s: %w", dir, err)
	}
	if allowAll {
		return false, fmt.Errorf("%s: %w", dir, ErrUnrestricted)
	}
	if err := SetV1(dir, Target(cur, managed, want)); err != nil {
		return false, err
	}
	after, err := cgroups.ReadFile(dir, "devices.list")
	if err != nil {
		return true, fmt.Errorf("read device cgroup: %w", err)
	}
	return after != before, nil
}

// SetV1 puts a v1 devices directory in the state rules give a cgroup that
// denies everything, with the library's setter. The setter silently writes
// nothing inside a user namespace, so SetV1 refuses to run there rather than
// report a state the kernel does not hold; it also refuses rules that allow
// every device.
func SetV1(dir string, rules []*devconfig.Rule) error {
	set := cgroups.DevicesSetV1
	if set == nil {
		return errors.New("opencontainers/cgroups: no v1 device setter registered")
	}
	if err := checkSet(rules); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if err := set(dir, &cgroups.Resources{Devices: rules}); err != nil {
		return fmt.Errorf("%s: set device rules:\n%s: %w", dir, ruleList(rules), err)
	}
	return nil
}

// checkSet refuses what the library's setters would silently not do (inside
// a user namespace they write nothing) or what would open every device.
func checkSet(rules []*devconfig.Rule) error {
	if userns.RunningInUserNS() {
		return errors.New("cannot set device rules from inside a user namespace")
	}
	if AllowsAll(rules) {
		return ErrUnrestricted
	}
	for _, r := range rules {
		if err := CheckRule(*r); err != nil {
			return err
		}
	}
	return nil
}
