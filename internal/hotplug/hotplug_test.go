package hotplug

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups"
	devconfig "github.com/opencontainers/cgroups/devices/config"
)

func TestParseMountinfo(t *testing.T) {
	mi := `24 1 0:22 / /sys rw,nosuid - sysfs sysfs rw
30 24 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
35 30 0:31 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
36 30 0:32 / /sys/fs/cgroup/cpu\040x rw,relatime - cgroup cgroup rw,cpu
40 30 0:36 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
41 30 0:37 / /other rw,relatime - cgroup2 cgroup2 rw
`
	m, err := ParseMountinfo([]byte(mi))
	if err != nil || m != (Mounts{V1Devices: "/sys/fs/cgroup/devices", V2: "/sys/fs/cgroup/unified"}) {
		t.Fatalf("mounts = %+v", m)
	}
	if m, err := ParseMountinfo([]byte(`1 0 0:1 / /a\040b rw - cgroup2 cgroup2 rw`)); err != nil || m.V2 != "/a b" {
		t.Fatalf("escaped mount point = %q, %v", m.V2, err)
	}
	if _, err := ParseMountinfo([]byte(mi + "garbage line\n")); err == nil {
		t.Fatal("a malformed line parsed")
	}
}

func TestDeviceCgroup(t *testing.T) {
	hybrid := Mounts{V1Devices: "/sys/fs/cgroup/devices", V2: "/sys/fs/cgroup/unified"}
	pure := Mounts{V2: "/sys/fs/cgroup"}
	procHybrid := map[string]string{"name=systemd": "/kubepods/p1/c1", "devices": "/kubepods/p1/c1", "": "/"}
	procV2 := map[string]string{"": "/kubepods.slice/c1.scope"}
	cases := []struct {
		m    Mounts
		proc map[string]string
		want Cgroup
		err  bool
	}{
		{hybrid, procHybrid, Cgroup{Dir: "/sys/fs/cgroup/devices/kubepods/p1/c1"}, false},
		{pure, procV2, Cgroup{V2: true, Dir: "/sys/fs/cgroup/kubepods.slice/c1.scope"}, false},
		{Mounts{V1Devices: "/d"}, procV2, Cgroup{}, true},
		{hybrid, map[string]string{}, Cgroup{}, true},
		{pure, map[string]string{"": "/../../x"}, Cgroup{}, true},
	}
	for i, tc := range cases {
		got, err := DeviceCgroup(tc.m, tc.proc)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("case %d: %+v, %v; want %+v (error %v)", i, got, err, tc.want, tc.err)
		}
	}
}

func TestSpecCgroupPath(t *testing.T) {
	cases := []struct{ in, want string }{
		{"/kubepods/besteffort/pod0b3d/3f1c", "/kubepods/besteffort/pod0b3d/3f1c"},
		{"/gpuslice-e2e/kubepods/pod0b3d/3f1c/", "/gpuslice-e2e/kubepods/pod0b3d/3f1c"},
		{"kubepods-besteffort-pod0b3d.slice:cri-containerd:3f1c",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0b3d.slice/cri-containerd-3f1c.scope"},
		{"kubepods-pod0b3d.slice:crio:3f1c", "/kubepods.slice/kubepods-pod0b3d.slice/crio-3f1c.scope"},
		{":docker:3f1c", "/system.slice/docker-3f1c.scope"},
		{"kubepods.slice:x:extra.slice", "/kubepods.slice/extra.slice"},
	}
	for _, tc := range cases {
		if got, err := SpecCgroupPath(tc.in); err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "/", "/a/../b", "/a/..", "relative/path", "a:b", "a.slice:b:", "a.slice:p:n/x",
		"nope:p:n", "a/b.slice:p:n", "a:b:c:d"} {
		if got, err := SpecCgroupPath(bad); err == nil {
			t.Errorf("%q accepted as %q", bad, got)
		}
	}
}

func gpuNodes(n int) []devconfig.Device {
	var out []devconfig.Device
	for i := range n {
		out = append(out, devconfig.Device{Path: "/dev/nvidia" + strconv.Itoa(i), FileMode: 0o666,
			Rule: devconfig.Rule{Type: devconfig.CharDevice, Major: 195, Minor: int64(i), Permissions: "rw"}})
	}
	return out
}

func wantSet(paths ...string) map[string]bool {
	m := map[string]bool{}
	for _, p := range paths {
		m[p] = true
	}
	return m
}

func TestSyncNodesInMountNamespace(t *testing.T) {
	needRoot(t)
	h := startHelper(t)
	pid := h.cmd.Process.Pid
	nodes := gpuNodes(3)
	if _, err := os.Stat("/dev/nvidia1"); err == nil {
		t.Skip("host has /dev/nvidia1; this test checks that nothing lands on the host")
	}
	changed, err := SyncNodes("/proc", pid, nodes, wantSet("/dev/nvidia1"))
	if err != nil || !changed {
		t.Fatalf("SyncNodes: changed=%v err=%v", changed, err)
	}
	if got := h.ask("stat", "/dev/nvidia1"); got != "020666 195:1" {
		t.Fatalf("inside: stat /dev/nvidia1 = %s", got)
	}
	if _, err := os.Stat("/dev/nvidia1"); err == nil {
		t.Fatal("node appeared on the host")
	}
	if changed, err := SyncNodes("/proc", pid, nodes, wantSet("/dev/nvidia1")); err != nil || changed {
		t.Fatalf("repeat: changed=%v err=%v", changed, err)
	}
	if _, err := SyncNodes("/proc", pid, nodes, wantSet("/dev/nvidia0")); err != nil {
		t.Fatal(err)
	}
	if got := h.ask("stat", "/dev/nvidia1"); got != "ENOENT" {
		t.Fatalf("removed node: stat = %s", got)
	}
	// Something else at a managed path is never touched.
	foreign := filepath.Join("/proc", strconv.Itoa(pid), "root", "dev", "nvidia2")
	if err := os.WriteFile(foreign, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := SyncNodes("/proc", pid, nodes, wantSet("/dev/nvidia2")); !errors.Is(err, ErrForeignNode) {
		t.Fatalf("foreign file: err = %v", err)
	}
	if _, err := SyncNodes("/proc", pid, nodes, nil); err != nil {
		t.Fatalf("unwanted foreign file: %v", err)
	}
	if b, err := os.ReadFile(foreign); err != nil || string(b) != "mine" {
		t.Fatalf("foreign file changed: %q %v", b, err)
	}
	// A symlink in the container cannot send us to the host.
	hostDir := t.TempDir()
	if err := os.Symlink(hostDir, filepath.Join("/proc", strconv.Itoa(pid), "root", "dev", "link")); err != nil {
		t.Fatal(err)
	}
	evil := []devconfig.Device{{Path: "/dev/link/nvidia0", Rule: nodes[0].Rule, FileMode: 0o666}}
	if _, err := SyncNodes("/proc", pid, evil, wantSet("/dev/link/nvidia0")); err == nil {
		t.Fatal("followed a symlink")
	}
	if ents, _ := os.ReadDir(hostDir); len(ents) != 0 {
		t.Fatalf("created %v on the host through a symlink", ents)
	}
}

// v1Base makes the cgroup deny everything but what runc gives every container.
func v1Base(t *testing.T, dir string, extra ...string) {
	t.Helper()
	if err := cgroups.WriteFile(dir, "devices.deny", "a"); err != nil {
		t.Fatal(err)
	}
	for _, r := range append([]string{"c 1:3 rwm", "c *:* m", "b *:* m", "c 136:* rwm"}, extra...) {
		if err := cgroups.WriteFile(dir, "devices.allow", r); err != nil {
			t.Fatal(err)
		}
	}
}

func v1Mounts(t *testing.T) Mounts {
	t.Helper()
	m, err := FindMounts("/proc")
	if err != nil || m.V1Devices == "" {
		t.Skipf("no cgroup v1 devices controller here (%+v, %v)", m, err)
	}
	return m
}

func TestApplyV1(t *testing.T) {
	needRoot(t)
	m := v1Mounts(t)
	h := startHelper(t)
	pid := h.cmd.Process.Pid
	dir := newCgroup(t, m.V1Devices, pid)
	v1Base(t, dir)
	cg, err := CgroupOfPID(m, "/proc", pid)
	if err != nil || cg.Dir != dir || cg.V2 {
		t.Fatalf("CgroupOfPID = %+v, %v; want %s", cg, err, dir)
	}
	c := Container{PID: pid, Cgroup: cg}
	nodes := gpuNodes(3)
	if _, err := Apply("/proc", nil, c, nodes, wantSet("/dev/nvidia1")); err != nil {
		t.Fatal(err)
	}
	// ENXIO: allowed, but no driver behind major 195 here.
	h.expectOpen(map[string]string{"/dev/nvidia1": "ENXIO", "/dev/nvidia0": "ENOENT"})
	// A node made behind our back is still denied by the cgroup.
	sneak := nodes[:1]
	if _, err := SyncNodes("/proc", pid, sneak, wantSet("/dev/nvidia0")); err != nil {
		t.Fatal(err)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "EPERM"})

	if _, err := Apply("/proc", nil, c, nodes, wantSet("/dev/nvidia0", "/dev/nvidia2")); err != nil {
		t.Fatal(err)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENXIO", "/dev/nvidia1": "ENOENT", "/dev/nvidia2": "ENXIO", "/dev/null": "ENOENT"})
	assertList(t, dir, "c 1:3 rwm", "c 195:0 rw", "c 195:2 rw")

	// The runtime rewrites the rules: the next Apply restores them.
	if err := cgroups.WriteFile(dir, "devices.deny", "c 195:0 rwm"); err != nil {
		t.Fatal(err)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "EPERM"})
	if changed, err := Apply("/proc", nil, c, nodes, wantSet("/dev/nvidia0", "/dev/nvidia2")); err != nil || !changed {
		t.Fatalf("restore: changed=%v err=%v", changed, err)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENXIO"})
	if changed, err := Apply("/proc", nil, c, nodes, wantSet("/dev/nvidia0", "/dev/nvidia2")); err != nil || changed {
		t.Fatalf("repeat: changed=%v err=%v", changed, err)
	}
	if _, err := Apply("/proc", nil, c, nodes, nil); err != nil {
		t.Fatal(err)
	}
	h.expectOpen(map[string]string{"/dev/nvidia0": "ENOENT", "/dev/nvidia2": "ENOENT"})
	assertList(t, dir, "c 1:3 rwm")
	if l, _ := os.ReadFile(filepath.Join(dir, "devices.list")); strings.Contains(string(l), "195:") {
		t.Fatalf("GPU rules left: %q", l)
	}
}

func assertList(t *testing.T, dir string, lines ...string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "devices.list"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if !strings.Contains(string(b), l+"\n") {
			t.Errorf("devices.list lacks %q:\n%s", l, b)
		}
	}
}

func TestSyncV1Refuses(t *testing.T) {
	needRoot(t)
	m := v1Mounts(t)
	h := startHelper(t)
	dev := gpuNodes(1)
	open := newCgroup(t, m.V1Devices, h.cmd.Process.Pid)
	if _, err := SyncV1(open, dev, nil); !errors.Is(err, ErrUnrestricted) {
		t.Fatalf("allow-all cgroup: err = %v", err)
	}
	// A wildcard rule allows the GPU: the library refuses to punch a hole.
	v1Base(t, open, "c 195:* rw")
	before, _ := os.ReadFile(filepath.Join(open, "devices.list"))
	if _, err := SyncV1(open, dev, nil); err == nil || !strings.Contains(err.Error(), "punch hole") {
		t.Fatalf("wildcard: err = %v", err)
	}
	after, _ := os.ReadFile(filepath.Join(open, "devices.list"))
	if string(before) != string(after) {
		t.Fatalf("a refused sync changed the rules: %q -> %q", before, after)
	}
	h.expectOpen(map[string]string{"/dev/null": "ENOENT"})
}
