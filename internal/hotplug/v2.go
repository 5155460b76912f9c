package hotplug

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/devices"
)

// ProgramName names the device programs the agent attaches, so a restarted
// agent recognises (and replaces) its own.
const ProgramName = "gpuslice_dev"

// bpfFAllowMulti is BPF_F_ALLOW_MULTI, the flag runc attaches with.
const bpfFAllowMulti = 2

// SyncV2 makes the single device program of a cgroup v2 directory the one
// that allows base (the container's own device rules, e.g. from its OCI
// config) plus the devices in want. On cgroup v2 every attached program must
// allow an access, so adding a device means replacing the runtime's program:
// the new program is attached first and every other device program detached
// after, so no instant allows more than either. Nothing changes when exactly
// the wanted program is attached already.
func SyncV2(dir string, base []devices.Rule, want map[devices.Device]devices.Perms) (changed bool, err error) {
	insns, err := buildV2(base, want)
	if err != nil {
		return false, err
	}
	cg, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("open cgroup: %w", err)
	}
	defer closeFD(cg)
	progs, err := attachedV2(cg)
	if err != nil {
		return false, fmt.Errorf("%s: %w", dir, err)
	}
	if len(progs) == 1 && progs[0].name == ProgramName {
		same, err := insns.HasTag(progs[0].tag, binary.LittleEndian)
		if err != nil {
			closeAll(progs)
			return false, fmt.Errorf("device program tag: %w", err)
		}
		if same {
			closeAll(progs)
			return false, nil
		}
	}
	defer closeAll(progs)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: ProgramName, Type: ebpf.CGroupDevice, Instructions: insns, License: devices.ProgramLicense})
	if err != nil {
		return false, fmt.Errorf("load device program: %w", err)
	}
	defer prog.Close()
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{
		Target: cg, Program: prog, Attach: ebpf.AttachCGroupDevice, Flags: bpfFAllowMulti}); err != nil {
		return false, fmt.Errorf("%s: attach device program: %w", dir, err)
	}
	var errs []error
	for _, p := range progs {
		if err := link.RawDetachProgram(link.RawDetachProgramOptions{
			Target: cg, Program: p.prog, Attach: ebpf.AttachCGroupDevice}); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("%s: detach device program %q: %w", dir, p.name, err))
		}
	}
	return true, errors.Join(errs...)
}

// buildV2 builds the program for base plus want, with its jumps resolved
// (so its tag can be compared with an attached program's).
func buildV2(base []devices.Rule, want map[devices.Device]devices.Perms) (asm.Instructions, error) {
	e, err := devices.FromRules(base)
	if err != nil {
		return nil, fmt.Errorf("container device rules: %w", err)
	}
	keys := make([]devices.Device, 0, len(want))
	for d := range want {
		keys = append(keys, d)
	}
	slices.SortFunc(keys, func(a, b devices.Device) int {
		return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Major, b.Major), cmp.Compare(a.Minor, b.Minor))
	})
	for _, d := range keys {
		if p := want[d]; p != 0 {
			if err := e.Apply(devices.DeviceRule(d, p, true)); err != nil {
				return nil, err
			}
		}
	}
	prog := devices.Program(e)
	if err := prog.Marshal(io.Discard, binary.LittleEndian); err != nil {
		return nil, fmt.Errorf("device program: %w", err)
	}
	return prog, nil
}

type attached struct {
	prog      *ebpf.Program
	name, tag string
}

func closeAll(ps []attached) {
	for _, p := range ps {
		_ = p.prog.Close() // closing our reference; the attachment keeps its own
	}
}

// attachedV2 lists the device programs attached to a cgroup directly.
func attachedV2(cg int) ([]attached, error) {
	q, err := link.QueryPrograms(link.QueryOptions{Target: cg, Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		return nil, fmt.Errorf("query device programs: %w", err)
	}
	var out []attached
	for _, ap := range q.Programs {
		p, err := ebpf.NewProgramFromID(ap.ID)
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("device program %d: %w", ap.ID, err)
		}
		info, err := p.Info()
		if err != nil {
			_ = p.Close()
			closeAll(out)
			return nil, fmt.Errorf("device program %d: %w", ap.ID, err)
		}
		out = append(out, attached{prog: p, name: info.Name, tag: info.Tag})
	}
	return out, nil
}

// ProgramsV2 reports the names of the device programs attached to a cgroup v2
// directory (for checks: after SyncV2 there is exactly one, ours).
func ProgramsV2(dir string) ([]string, error) {
	cg, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	defer closeFD(cg)
	ps, err := attachedV2(cg)
	if err != nil {
		return nil, err
	}
	defer closeAll(ps)
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.name)
	}
	return out, nil
}

// DetachV2 detaches the agent's own device programs from a cgroup v2
// directory (others are left alone).
func DetachV2(dir string) error {
	cg, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open cgroup: %w", err)
	}
	defer closeFD(cg)
	ps, err := attachedV2(cg)
	if err != nil {
		return err
	}
	defer closeAll(ps)
	var errs []error
	for _, p := range ps {
		if p.name != ProgramName {
			continue
		}
		if err := link.RawDetachProgram(link.RawDetachProgramOptions{Target: cg, Program: p.prog, Attach: ebpf.AttachCGroupDevice}); err != nil {
			errs = append(errs, fmt.Errorf("%s: detach: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}
