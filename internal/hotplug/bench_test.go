package hotplug

import (
	"os"
	"testing"

	"github.com/opencontainers/cgroups"
)

// BenchmarkApply: one hot swap of a GPU (deny one, allow another, move the
// nodes) in a live process's cgroup and mount namespace.
func BenchmarkApply(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	for _, v2 := range []bool{false, true} {
		name := "v1"
		if v2 {
			name = "v2-ebpf"
		}
		b.Run(name, func(b *testing.B) { benchApply(b, v2) })
	}
}

func benchApply(b *testing.B, v2 bool) {
	m, err := FindMounts("/proc")
	if err != nil || (v2 && m.V2 == "") || (!v2 && m.V1Devices == "") {
		b.Skipf("hierarchy missing: %+v %v", m, err)
	}
	h := startHelper(b)
	pid := h.cmd.Process.Pid
	parent := m.V1Devices
	if v2 {
		parent = m.V2
	}
	dir := newCgroup(b, parent, pid)
	base := rulesOf(b, "deny a", "allow c 1:3 rwm")
	if !v2 {
		if err := cgroups.WriteFile(dir, "devices.deny", "a"); err != nil {
			b.Fatal(err)
		}
		if err := cgroups.WriteFile(dir, "devices.allow", "c 1:3 rwm"); err != nil {
			b.Fatal(err)
		}
	}
	c := Container{PID: pid, Cgroup: Cgroup{V2: v2, Dir: dir}, Base: base}
	nodes := gpuNodes(4)
	progs := NewPrograms(16)
	wants := []map[string]bool{wantSet("/dev/nvidia1"), wantSet("/dev/nvidia2")}
	for i := 0; b.Loop(); i++ {
		if _, err := Apply("/proc", progs, c, nodes, wants[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}
