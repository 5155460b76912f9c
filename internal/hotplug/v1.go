package hotplug

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

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
// as it is. It reads devices.list, writes only the difference (removals
// first) and reads the result back.
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
	writes := cur.Transition(true, target)
	for _, w := range writes {
		file := "devices.deny"
		if w.Allow {
			file = "devices.allow"
		}
		if err := writeCgroupFile(filepath.Join(dir, file), w.String()); err != nil {
			return true, err
		}
	}
	if len(writes) == 0 {
		return false, nil
	}
	got, err := readV1(dir)
	if err != nil {
		return true, err
	}
	if !got.Equal(target) {
		return true, fmt.Errorf("%s: devices.list is %q after writing %v, want %q", dir, got.List(), writes, target.List())
	}
	return true, nil
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
