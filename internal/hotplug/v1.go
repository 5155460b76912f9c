package hotplug

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/moby/sys/userns"
	"github.com/opencontainers/cgroups"

	// Registers the library's device setters (cgroups.DevicesSetV1/V2).
	_ "github.com/opencontainers/cgroups/devices"
	devconfig "github.com/opencontainers/cgroups/devices/config"

	"github.com/gpuslice/gpuslice/internal/devices"
)

// ErrUnrestricted wraps a device cgroup that allows every device (a
// privileged container): access cannot be narrowed to the assignment.
var ErrUnrestricted = errors.New("device cgroup allows every device")

// ErrCovered wraps a device that cannot be denied because a wildcard rule of
// the container allows it (the devices controller cannot punch holes).
var ErrCovered = errors.New("device allowed by a wildcard rule")

// SyncV1 makes the managed devices of a cgroup v1 devices directory allowed
// with exactly the access in want (absent: denied), leaving every other rule
// as it is. It reads devices.list and decides the target state; the
// writes are opencontainers/cgroups' v1 device setter (only the difference,
// removals first, checked against devices.list after). Nothing is written
// when the cgroup is in the target state already.
func SyncV1(dir string, managed []devices.Device, want map[devices.Device]devices.Perms) (changed bool, err error) {
	cur, err := readV1(dir)
	if err != nil {
		return false, err
	}
	target := cur.Clone()
	for _, d := range managed {
		if err := target.Apply(devices.DeviceRule(d, devices.PermsAll, false)); err != nil {
			return false, err
		}
		if p := want[d]; p != 0 {
			if err := target.Apply(devices.DeviceRule(d, p, true)); err != nil {
				return false, err
			}
		}
	}
	for _, d := range managed {
		if want[d] == 0 && (target.Allows(d, devices.Read) || target.Allows(d, devices.Write)) {
			return false, fmt.Errorf("%s: %w", d, ErrCovered)
		}
	}
	if target.Equal(cur) {
		return false, nil
	}
	if err := SetV1(dir, target); err != nil {
		return true, err
	}
	return true, nil
}

// SetV1 puts a v1 devices directory in state target (a deny-all default and
// its exceptions) with the library's setter, which writes the difference and
// checks devices.list after. The setter silently writes nothing inside a user
// namespace, so SetV1 refuses to run there rather than report a state the
// kernel does not hold.
func SetV1(dir string, target *devices.Emulator) error {
	set := cgroups.DevicesSetV1
	if set == nil {
		return errors.New("opencontainers/cgroups: no v1 device setter registered")
	}
	if userns.RunningInUserNS() {
		return fmt.Errorf("%s: cannot set device rules from inside a user namespace", dir)
	}
	if target.DefaultAllow() {
		return fmt.Errorf("%s: refusing to allow every device", dir)
	}
	ex := target.Exceptions()
	rules := make([]*devconfig.Rule, 0, len(ex))
	for _, r := range ex {
		rules = append(rules, &devconfig.Rule{Type: devconfig.Type(r.Type), Major: r.Major, Minor: r.Minor,
			Permissions: devconfig.Permissions(r.Perms.String()), Allow: r.Allow})
	}
	if err := set(dir, &cgroups.Resources{Devices: rules}); err != nil {
		return fmt.Errorf("%s: set device rules %q: %w", dir, target.List(), err)
	}
	return nil
}

func readV1(dir string) (*devices.Emulator, error) {
	b, err := os.ReadFile(filepath.Join(dir, "devices.list"))
	if err != nil {
		return nil, fmt.Errorf("read device cgroup: %w", err)
	}
	e, known, err := devices.ParseList(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if !known {
		return nil, fmt.Errorf("%s: %w", dir, ErrUnrestricted)
	}
	return e, nil
}

// writeCgroupFile writes one value to an existing cgroup control file.
func writeCgroupFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, werr)
	}
	if cerr != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, cerr)
	}
	return nil
}

// AllowedV1 lists which of the managed devices a v1 devices directory allows
// read-write (the applied state).
func AllowedV1(dir string, managed []devices.Device) ([]devices.Device, error) {
	e, err := readV1(dir)
	if err != nil {
		return nil, err
	}
	var out []devices.Device
	for _, d := range managed {
		if e.Allows(d, devices.Read|devices.Write) {
			out = append(out, d)
		}
	}
	return slices.Clip(out), nil
}
