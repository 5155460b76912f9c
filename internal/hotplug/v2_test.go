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

// v2Container is a helper process in a cgroup v2 of its own with the
// runtime's program attached, as runc leaves a container, and the agent's
// programs.
type v2Container struct {
	t     *testing.T
	h     *helper
	pid   int
	dir   string
	base  []*devconfig.Rule
	progs *Programs
	c     Container
	nodes []devconfig.Device // three GPU nodes
}

func newV2Container(t *testing.T) *v2Container {
	m := v2Mounts(t)
	v := &v2Container{t: t, h: startHelper(t), base: runcBase(t), progs: NewPrograms(16), nodes: gpuNodes(3)}
	v.pid = v.h.cmd.Process.Pid
	v.dir = newCgroup(t, m.V2, v.pid)
	attachRuntime(t, v.dir, v.base)
	v.c = Container{PID: v.pid, Cgroup: Cgroup{V2: true, Dir: v.dir}, Base: v.base}
	return v
}

// apply applies the devices want to the container and says whether
// anything changed.
func (v *v2Container) apply(want ...string) bool {
	v.t.Helper()
	changed, err := Apply("/proc", v.progs, v.c, v.nodes, wantSet(want...))
	if err != nil {
		v.t.Fatalf("Apply %v: %v", want, err)
	}
	return changed
}

// syncNodes makes the device nodes want of managed in the container.
func (v *v2Container) syncNodes(managed []devconfig.Device, want ...string) {
	v.t.Helper()
	if _, err := SyncNodes("/proc", v.pid, managed, wantSet(want...)); err != nil {
		v.t.Fatal(err)
	}
}

// oneProgram checks that exactly one device program is attached.
func (v *v2Container) oneProgram() {
	v.t.Helper()
	if n := attachedCount(v.t, v.dir); n != 1 {
		v.t.Fatalf("%d programs attached, want 1", n)
	}
}

func TestApplyV2(t *testing.T) {
	needRoot(t)
	v := newV2Container(t)
	h := v.h
	// The runtime's program denies a GPU node made behind its back.
	v.syncNodes(v.nodes, "/dev/nvidia0", "/dev/nvidia1")
	h.expectOpen(map[string]string{"/dev/nvidia0": "EPERM", "/dev/nvidia1": "EPERM"})

	if !v.apply("/dev/nvidia1") {
		t.Fatal("Apply changed nothing")
	}
	v.oneProgram()
	h.expectOpen(map[string]string{"/dev/nvidia1": "ENXIO", "/dev/nvidia0": "ENOENT"})
	v.syncNodes(v.nodes[:1], "/dev/nvidia0")
	h.expectOpen(map[string]string{"/dev/nvidia0": "EPERM"})

	// The same state again loads nothing.
	if changed, err := SyncV2(v.progs, v.dir, v.base, v.nodes, wantSet("/dev/nvidia1")); err != nil || changed {
		t.Fatalf("repeat: changed=%v err=%v", changed, err)
	}
	// A restarted agent (nothing remembered) sets it once, then not again.
	v.progs = NewPrograms(16)
	for i, want := range []bool{true, false} {
		if changed, err := SyncV2(v.progs, v.dir, v.base, v.nodes, wantSet("/dev/nvidia1")); err != nil || changed != want {
			t.Fatalf("after restart, sync %d: changed=%v err=%v", i, changed, err)
		}
	}
	v.apply("/dev/nvidia1")
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENOENT"})
	// Swap GPUs: still exactly one program.
	v.apply("/dev/nvidia0", "/dev/nvidia2")
	v.oneProgram()
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENXIO", "/dev/nvidia1": "ENOENT", "/dev/nvidia2": "ENXIO", "/dev/null": "ENOENT"})

	// The runtime re-attaches its program (e.g. on an update): reconciled.
	attachRuntime(t, v.dir, v.base)
	h.expectOpen(map[string]string{"/dev/nvidia0": "EPERM"})
	if !v.apply("/dev/nvidia0", "/dev/nvidia2") {
		t.Fatal("reconcile: Apply changed nothing")
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENXIO"})
	// Another program beside ours: both replaced by one.
	attachExtra(t, v.dir)
	if !v.apply("/dev/nvidia0", "/dev/nvidia2") {
		t.Fatal("two programs: Apply changed nothing")
	}
	v.oneProgram()
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENXIO", "/dev/nvidia1": "ENOENT"})

	// A kubelet-made OCI config (deny all, the device plugin's GPU) lacks
	// what runc allows every container: with the runtime's defaults the
	// rebuilt program keeps /dev/null usable.
	null := []devconfig.Device{{Path: "/dev/null", FileMode: 0o666, Rule: devconfig.Rule{Type: devconfig.CharDevice, Major: 1, Minor: 3}}}
	v.syncNodes(null, "/dev/null")
	v.c.Base = append(rulesOf(t, "deny a", "allow c 195:0 rw"), RuntimeDefaultRules()...)
	v.apply("/dev/nvidia2")
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
