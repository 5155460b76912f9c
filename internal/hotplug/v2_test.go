package hotplug

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/opencontainers/cgroups"
	devconfig "github.com/opencontainers/cgroups/devices/config"
	"golang.org/x/sys/unix"
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
func runcBase(t *testing.T) []*devconfig.Rule {
	t.Helper()
	return rulesOf(t, "deny a", "allow c 1:3 rwm", "allow c 1:5 rwm", "allow c *:* m", "allow b *:* m", "allow c 136:* rwm")
}

// attachRuntime attaches the runtime's program for base the way runc does
// (the same library), replacing what is attached.
func attachRuntime(t *testing.T, dir string, base []*devconfig.Rule) {
	t.Helper()
	if err := cgroups.DevicesSetV2(dir, &cgroups.Resources{Devices: base}); err != nil {
		t.Fatal(err)
	}
}

// attachExtra attaches one more device program (allow everything) beside
// what is attached, as another tool might.
func attachExtra(t *testing.T, dir string) {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.CGroupDevice, License: "Apache-2.0",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cg, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(cg)
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: cg, Program: p,
		Attach: ebpf.AttachCGroupDevice, Flags: unix.BPF_F_ALLOW_MULTI}); err != nil {
		t.Fatal(err)
	}
}

func attachedCount(t *testing.T, dir string) int {
	t.Helper()
	tags, err := AttachedV2(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(tags)
}

func TestApplyV2(t *testing.T) {
	needRoot(t)
	m := v2Mounts(t)
	h := startHelper(t)
	pid := h.cmd.Process.Pid
	dir := newCgroup(t, m.V2, pid)
	base := runcBase(t)
	attachRuntime(t, dir, base)
	progs := NewPrograms(16)
	c := Container{PID: pid, Cgroup: Cgroup{V2: true, Dir: dir}, Base: base}
	nodes := gpuNodes(3)
	// The runtime's program denies a GPU node made behind its back.
	if _, err := SyncNodes("/proc", pid, nodes, wantSet("/dev/nvidia0", "/dev/nvidia1")); err != nil {
		t.Fatal(err)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "EPERM", "/dev/nvidia1": "EPERM"})

	if changed, err := Apply("/proc", progs, c, nodes, wantSet("/dev/nvidia1")); err != nil || !changed {
		t.Fatalf("Apply: changed=%v err=%v", changed, err)
	}
	if n := attachedCount(t, dir); n != 1 {
		t.Fatalf("%d programs attached, want 1", n)
	}
	h.expectOpen(map[string]string{"/dev/nvidia1": "ENXIO", "/dev/nvidia0": "ENOENT"})
	if _, err := SyncNodes("/proc", pid, nodes[:1], wantSet("/dev/nvidia0")); err != nil {
		t.Fatal(err)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "EPERM"})

	// The same state again loads nothing.
	if changed, err := SyncV2(progs, dir, base, nodes, wantSet("/dev/nvidia1")); err != nil || changed {
		t.Fatalf("repeat: changed=%v err=%v", changed, err)
	}
	// A restarted agent (nothing remembered) sets it once, then not again.
	progs = NewPrograms(16)
	for i, want := range []bool{true, false} {
		if changed, err := SyncV2(progs, dir, base, nodes, wantSet("/dev/nvidia1")); err != nil || changed != want {
			t.Fatalf("after restart, sync %d: changed=%v err=%v", i, changed, err)
		}
	}
	if _, err := Apply("/proc", progs, c, nodes, wantSet("/dev/nvidia1")); err != nil {
		t.Fatal(err)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENOENT"})
	// Swap GPUs: still exactly one program.
	if _, err := Apply("/proc", progs, c, nodes, wantSet("/dev/nvidia0", "/dev/nvidia2")); err != nil {
		t.Fatal(err)
	}
	if n := attachedCount(t, dir); n != 1 {
		t.Fatalf("%d programs attached, want 1", n)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENXIO", "/dev/nvidia1": "ENOENT", "/dev/nvidia2": "ENXIO", "/dev/null": "ENOENT"})

	// The runtime re-attaches its program (e.g. on an update): reconciled.
	attachRuntime(t, dir, base)
	h.expectOpen(map[string]string{"/dev/nvidia0": "EPERM"})
	if changed, err := Apply("/proc", progs, c, nodes, wantSet("/dev/nvidia0", "/dev/nvidia2")); err != nil || !changed {
		t.Fatalf("reconcile: changed=%v err=%v", changed, err)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENXIO"})
	// Another program beside ours: both replaced by one.
	attachExtra(t, dir)
	if changed, err := Apply("/proc", progs, c, nodes, wantSet("/dev/nvidia0", "/dev/nvidia2")); err != nil || !changed {
		t.Fatalf("two programs: changed=%v err=%v", changed, err)
	}
	if n := attachedCount(t, dir); n != 1 {
		t.Fatalf("%d programs attached, want 1", n)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENXIO", "/dev/nvidia1": "ENOENT"})

	// A kubelet-made OCI config (deny all, the device plugin's GPU) lacks
	// what runc allows every container: with the runtime's defaults the
	// rebuilt program keeps /dev/null usable.
	null := []devconfig.Device{{Path: "/dev/null", FileMode: 0o666, Rule: devconfig.Rule{Type: devconfig.CharDevice, Major: 1, Minor: 3}}}
	if _, err := SyncNodes("/proc", pid, null, wantSet("/dev/null")); err != nil {
		t.Fatal(err)
	}
	c.Base = append(rulesOf(t, "deny a", "allow c 195:0 rw"), RuntimeDefaultRules()...)
	if _, err := Apply("/proc", progs, c, nodes, wantSet("/dev/nvidia2")); err != nil {
		t.Fatal(err)
	}
	h.expectOpen(map[string]string{"/dev/null": "ok", "/dev/nvidia2": "ENXIO", "/dev/nvidia0": "ENOENT"})
}

func TestSyncV2Refuses(t *testing.T) {
	needRoot(t)
	m := v2Mounts(t)
	h := startHelper(t)
	dir := newCgroup(t, m.V2, h.cmd.Process.Pid)
	progs := NewPrograms(4)
	nodes := gpuNodes(1)
	privileged := rulesOf(t, "allow a")
	if _, err := SyncV2(progs, dir, privileged, nodes, nil); !errors.Is(err, ErrUnrestricted) {
		t.Fatalf("privileged: err = %v", err)
	}
	covered := append(runcBase(t), rulesOf(t, "allow c 195:* rw")...)
	if _, err := SyncV2(progs, dir, covered, nodes, nil); err == nil {
		t.Fatal("a GPU a wildcard allows was denied")
	}
	if n := attachedCount(t, dir); n != 0 {
		t.Fatalf("a refused sync attached %d programs", n)
	}
}
