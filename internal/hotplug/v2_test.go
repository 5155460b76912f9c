package hotplug

import (
	"os"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/devices"
)

func v2Mounts(t *testing.T) Mounts {
	t.Helper()
	m, err := FindMounts("/proc")
	if err != nil || m.V2 == "" {
		t.Skipf("no cgroup v2 hierarchy here (%+v, %v)", m, err)
	}
	return m
}

// runcBase is the device list runc gives every container (abridged).
func runcBase(t *testing.T) []devices.Rule {
	t.Helper()
	var out []devices.Rule
	for _, s := range []string{"c 1:3 rwm", "c 1:5 rwm", "c *:* m", "b *:* m", "c 136:* rwm"} {
		out = append(out, mustRule(t, s, true))
	}
	return out
}

func mustRule(t *testing.T, s string, allow bool) devices.Rule {
	t.Helper()
	r, err := devices.ParseRule(s, allow)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// attachForeign attaches a device program the way a runtime would (another
// name, base rules only).
func attachForeign(t *testing.T, dir string, base []devices.Rule) {
	t.Helper()
	e, err := devices.FromRules(base)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "runc_dev", Type: ebpf.CGroupDevice,
		Instructions: devices.Program(e), License: devices.ProgramLicense})
	if err != nil {
		t.Skipf("cannot load a device program here: %v", err)
	}
	defer p.Close()
	cg, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(cg)
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: cg, Program: p,
		Attach: ebpf.AttachCGroupDevice, Flags: bpfFAllowMulti}); err != nil {
		t.Fatal(err)
	}
}

func expectPrograms(t *testing.T, dir string, want ...string) {
	t.Helper()
	got, err := ProgramsV2(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("attached programs %q, want %q", got, want)
	}
}

func TestApplyV2(t *testing.T) {
	needRoot(t)
	m := v2Mounts(t)
	h := startHelper(t)
	pid := h.cmd.Process.Pid
	dir := newCgroup(t, m.V2, pid)
	base := runcBase(t)
	attachForeign(t, dir, base)
	c := Container{PID: pid, Cgroup: Cgroup{V2: true, Dir: dir}, Base: base}
	nodes := gpuNodes(3)
	rw := devices.Read | devices.Write
	// The runtime's program denies a GPU node made behind its back.
	if _, err := SyncNodes("/proc", pid, nodes, wantSet("/dev/nvidia0", "/dev/nvidia1")); err != nil {
		t.Fatal(err)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "EPERM", "/dev/nvidia1": "EPERM"})

	if changed, err := Apply("/proc", c, nodes, wantSet("/dev/nvidia1"), rw); err != nil || !changed {
		t.Fatalf("Apply: changed=%v err=%v", changed, err)
	}
	expectPrograms(t, dir, ProgramName)
	h.expectOpen(map[string]string{"/dev/nvidia1": "ENXIO", "/dev/nvidia0": "ENOENT"})
	if _, err := SyncNodes("/proc", pid, nodes[:1], wantSet("/dev/nvidia0")); err != nil {
		t.Fatal(err)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "EPERM"})

	// A restarted agent asking for the same state changes nothing (the
	// sneaked node apart, which it removes).
	if changed, err := SyncV2(dir, base, map[devices.Device]devices.Perms{nodes[1].Device: rw}); err != nil || changed {
		t.Fatalf("repeat: changed=%v err=%v", changed, err)
	}
	if _, err := Apply("/proc", c, nodes, wantSet("/dev/nvidia1"), rw); err != nil {
		t.Fatal(err)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENOENT"})
	// Swap GPUs: still exactly one program, ours.
	if _, err := Apply("/proc", c, nodes, wantSet("/dev/nvidia0", "/dev/nvidia2"), rw); err != nil {
		t.Fatal(err)
	}
	expectPrograms(t, dir, ProgramName)
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENXIO", "/dev/nvidia1": "ENOENT", "/dev/nvidia2": "ENXIO"})

	// The runtime re-attaches its program (e.g. on an update): reconciled.
	attachForeign(t, dir, base)
	h.expectOpen(map[string]string{"/dev/nvidia0": "EPERM"})
	if changed, err := Apply("/proc", c, nodes, wantSet("/dev/nvidia0", "/dev/nvidia2"), rw); err != nil || !changed {
		t.Fatalf("reconcile: changed=%v err=%v", changed, err)
	}
	expectPrograms(t, dir, ProgramName)
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENXIO"})

	if err := DetachV2(dir); err != nil {
		t.Fatal(err)
	}
	expectPrograms(t, dir)
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}
