package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/hotplug"
)

const (
	bindPod = "6f0b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d"
	bindCID = "9a8b7c6d5e4f"
)

// The reconciler binds each container's group to the container's own cgroup,
// as /proc/<pid>/cgroup shows it to the agent (and the daemon, its child): v1
// and v2, cgroupfs and systemd drivers, the host's cgroup namespace or one of
// the agent's own. A path that is not the container's own cgroup (its pod's,
// another container's, the agent's, a pid that left) binds nothing.
func TestBindContainer(t *testing.T) {
	sysd := "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + strings.ReplaceAll(bindPod, "-", "_") +
		".slice/cri-containerd-" + bindCID + ".scope"
	cgfs := "kubepods/besteffort/pod" + bindPod + "/" + bindCID
	cases := []struct {
		name    string
		v2      bool
		dir     string // the container's cgroup below the hierarchy's mount (from its OCI spec)
		procs   bool   // the container's pid is in that cgroup
		cgroup  string // /proc/<pid>/cgroup of the container's pid
		self    string // /proc/self/cgroup of the agent
		want    string // the binding, "" for none
		noMatch bool   // the error is ErrNoContainer
	}{
		{name: "v2 systemd", v2: true, dir: sysd, procs: true, cgroup: "0::/" + sysd + "\n",
			self: "0::/system.slice/gpuslice.service\n", want: "/" + sysd},
		{name: "v2 cgroupfs", v2: true, dir: cgfs, procs: true, cgroup: "0::/" + cgfs + "\n",
			self: "0::/kubepods/besteffort/podA/agent\n", want: "/" + cgfs},
		{name: "v2 agent's own cgroup namespace", v2: true, dir: cgfs, procs: true,
			cgroup: "0::/../../pod" + bindPod + "/" + bindCID + "\n", self: "0::/\n",
			want: "/../../pod" + bindPod + "/" + bindCID},
		{name: "v1 cgroupfs", dir: cgfs, procs: true,
			cgroup: "12:devices:/" + cgfs + "\n11:cpu,cpuacct:/" + cgfs + "\n1:name=systemd:/" + cgfs + "\n0::/\n",
			self:   "12:devices:/\n0::/\n", want: "/" + cgfs},
		{name: "v1 systemd", dir: sysd, procs: true,
			cgroup: "4:memory:/" + sysd + "\n3:devices:/" + sysd + "\n", self: "3:devices:/system.slice/kubelet.service\n", want: "/" + sysd},
		{name: "pod's cgroup", v2: true, dir: cgfs, procs: true, cgroup: "0::/kubepods/besteffort/pod" + bindPod + "\n", self: "0::/\n"},
		{name: "another container's", v2: true, dir: cgfs, procs: true, cgroup: "0::/kubepods/besteffort/pod" + bindPod + "/other\n", self: "0::/\n"},
		{name: "root", v2: true, dir: cgfs, procs: true, cgroup: "0::/\n", self: "0::/x\n"},
		{name: "above the namespace", v2: true, dir: cgfs, procs: true, cgroup: "0::/../..\n", self: "0::/\n"},
		{name: "not clean", v2: true, dir: cgfs, procs: true, cgroup: "0::/kubepods/besteffort/x/../pod" + bindPod + "/" + bindCID + "\n", self: "0::/\n"},
		{name: "the agent's too", v2: true, dir: "kubepods", procs: true, cgroup: "0::/kubepods\n", self: "0::/kubepods/burstable/podA/agent\n"},
		{name: "v1 without devices", dir: cgfs, procs: true, cgroup: "11:cpu:/" + cgfs + "\n", self: "11:cpu:/\n"},
		{name: "pid left", v2: true, dir: cgfs, cgroup: "0::/" + cgfs + "\n", self: "0::/\n", noMatch: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, c, g := bindFixture(t, tc.v2, tc.dir, tc.procs, tc.cgroup, tc.self)
			err := r.bindContainer(context.Background(), bindTestPod(), "main", c)
			if tc.want == "" {
				if err == nil || errors.Is(err, ErrNoContainer) != tc.noMatch {
					t.Fatalf("err = %v, want an error (ErrNoContainer: %v)", err, tc.noMatch)
				}
				if b := r.tree.Cgroup(g); b != "" {
					t.Fatalf("binding %q written", b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b := r.tree.Cgroup(g); b != tc.want {
				t.Fatalf("binding %q, want %q", b, tc.want)
			}
		})
	}
}

// The binding is rewritten when the container is replaced (a restart: a new
// cgroup), through a new file: a link left at its name is replaced, not
// followed. A container without a group (not gpuslice's) gets none.
func TestBindContainerRewrites(t *testing.T) {
	old := "kubepods/besteffort/pod" + bindPod + "/" + bindCID
	r, c, g := bindFixture(t, true, old, true, "0::/"+old+"\n", "0::/\n")
	ctx := context.Background()
	if err := r.bindContainer(ctx, bindTestPod(), "main", c); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("kept\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(r.tree.Path(g), group.FileCgroup)
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, file); err != nil {
		t.Fatal(err)
	}
	next := "kubepods/besteffort/pod" + bindPod + "/0123456789ab"
	c.Cgroup.Dir = filepath.Join(filepath.Dir(c.Cgroup.Dir), "0123456789ab")
	writeFile(t, filepath.Join(c.Cgroup.Dir, "cgroup.procs"), strconv.Itoa(c.PID)+"\n")
	writeFile(t, filepath.Join(r.procRoot, strconv.Itoa(c.PID), "cgroup"), "0::/"+next+"\n")
	if err := r.bindContainer(ctx, bindTestPod(), "main", c); err != nil {
		t.Fatal(err)
	}
	if b := r.tree.Cgroup(g); b != "/"+next {
		t.Fatalf("binding %q, want %q", b, "/"+next)
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "kept\n" {
		t.Fatalf("link followed: %q, %v", b, err)
	}
	if fi, err := os.Lstat(file); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("binding file: %v, %v", fi, err)
	}
	if err := r.tree.Remove(g); err != nil {
		t.Fatal(err)
	}
	if err := r.bindContainer(ctx, bindTestPod(), "main", c); err != nil || r.tree.Exists(g) {
		t.Fatalf("a container without a group: err %v, group made: %v", err, r.tree.Exists(g))
	}
}

func bindTestPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: bindPod}}
}

// bindFixture makes a reconciler with a group tree and a /proc of two files
// (the container's pid's and the agent's cgroup), and the container's cgroup
// directory (its cgroup.procs lists the pid if procs).
func bindFixture(t *testing.T, v2 bool, dir string, procs bool, cgroup, self string) (*reconciler, hotplug.Container, string) {
	t.Helper()
	root := t.TempDir()
	const pid = 4242
	c := hotplug.Container{PID: pid, Cgroup: hotplug.Cgroup{V2: v2, Dir: filepath.Join(root, "sys", dir)}}
	list := ""
	if procs {
		list = "17\n" + strconv.Itoa(pid) + "\n"
	}
	writeFile(t, filepath.Join(c.Cgroup.Dir, "cgroup.procs"), list)
	proc := filepath.Join(root, "proc")
	writeFile(t, filepath.Join(proc, strconv.Itoa(pid), "cgroup"), cgroup)
	writeFile(t, filepath.Join(proc, "self", "cgroup"), self)
	r := &reconciler{tree: group.NewTree(filepath.Join(root, "run")), procRoot: proc, cgroupPids: readPids}
	g := deviceplugin.GroupName(deviceplugin.Candidate{Name: "p", Container: "main", UID: bindPod})
	if err := r.tree.Create(g); err != nil {
		t.Fatal(err)
	}
	return r, c, g
}

// readPids reads a fake cgroup directory's cgroup.procs (opencontainers/cgroups
// reads only files of a cgroup file system).
func readPids(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
