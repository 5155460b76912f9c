package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpuset"
)

func TestContainerCgroup(t *testing.T) {
	root := t.TempDir()
	uid := "0b3d1c2e-1111-2222-3333-444455556666"
	dirs := []string{
		"kubepods/burstable/pod" + uid + "/abc123",
		"kubepods/pod" + uid + "/guaranteed1",
		"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice/cri-containerd-sys1.scope",
		"kubepods/besteffort/podother/abc123",
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for cid, want := range map[string]string{"abc123": dirs[0], "guaranteed1": dirs[1], "sys1": dirs[2]} {
		got, err := ContainerCgroup(root, "0b3d1c2e-1111-2222-3333-444455556666", cid)
		if err != nil || got != filepath.Join(root, want) {
			t.Errorf("%s: %q, %v; want %s", cid, got, err, want)
		}
	}
	for _, cid := range []string{"missing", "", "../x", "a*"} {
		if _, err := ContainerCgroup(root, "0b3d1c2e-1111-2222-3333-444455556666", cid); !errors.Is(err, ErrNoContainer) {
			t.Errorf("%q: err = %v", cid, err)
		}
	}
	procs := filepath.Join(root, dirs[0], "cgroup.procs")
	if err := os.WriteFile(procs, []byte(""), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FirstPID(filepath.Join(root, dirs[0])); !errors.Is(err, ErrNoContainer) {
		t.Fatalf("empty cgroup: %v", err)
	}
	if err := os.WriteFile(procs, []byte("4242\n4243\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if pid, err := FirstPID(filepath.Join(root, dirs[0])); err != nil || pid != 4242 {
		t.Fatalf("FirstPID = %d, %v", pid, err)
	}
	if runtimeID("containerd://abc") != "abc" || runtimeID("abc") != "abc" {
		t.Fatal("runtimeID")
	}
}

func TestConfigValidate(t *testing.T) {
	env := map[string]string{"NODE_NAME": "n1"}
	c := DefaultConfig(func(k string) string { return env[k] })
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	bad := []func(*Config){
		func(c *Config) { c.NodeName = "" },
		func(c *Config) { c.DevRoot = "dev" },
		func(c *Config) { c.SlotsPerGPU = 0 },
		func(c *Config) { c.Resync = time.Millisecond },
	}
	for i, mut := range bad {
		cc := c
		mut(&cc)
		if cc.Validate() == nil {
			t.Errorf("case %d accepted", i)
		}
	}
}

func TestInjectForSimulated(t *testing.T) {
	c := DefaultConfig(func(string) string { return "" })
	c.ControlDevices = []string{"/dev/null", "/dev/nonexistent-gpuslice"}
	in := injectFor(c, &gpu.Driver{Simulated: true, LibDir: "/opt/sim"},
		map[string]string{"GPUSLICE_SIM_GPUS": "4", "GPUSLICE_SIM_STATE": "/x/state", "GPUSLICE_SIM_HOST_PROC": "/h", "HOME": "/root"})
	if in.SimDir != "/opt/sim" || in.SimState != "/x/state" || in.SimHostProc != "/proc" || in.Env["GPUSLICE_SIM_GPUS"] != "4" || in.Env["GPUSLICE_SIM_DEVNODES"] != "1" || len(in.Env) != 2 {
		t.Fatalf("inject %+v", in)
	}
	if len(in.ControlDevices) != 1 || in.ControlDevices[0] != "/dev/null" {
		t.Fatalf("control devices %v (only existing ones)", in.ControlDevices)
	}
	if got := managedNodes([]gpuset.GPU{{Minor: 7}}); len(got) != 1 || got[0].Path != "/dev/nvidia7" || got[0].Major != 195 || got[0].Minor != 7 || got[0].Permissions != "rw" {
		t.Fatalf("managed %+v", got)
	}
}

func TestStaleGroups(t *testing.T) {
	pod := func(name, uid string, containers ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
		}
		return p
	}
	live := pod("trainer", "u1", "main", "side")
	keep := deviceplugin.GroupName(deviceplugin.Candidate{Name: "trainer", Container: "side", UID: "u1"})
	gone := deviceplugin.GroupName(deviceplugin.Candidate{Name: "old", Container: "main", UID: "u0"})
	young := deviceplugin.GroupName(deviceplugin.Candidate{Name: "new", Container: "main", UID: "u2"})
	ages := map[string]time.Duration{keep: time.Hour, gone: time.Hour, young: time.Second, "mine": time.Hour}
	got := staleGroups([]string{keep, gone, young, "mine"}, []*corev1.Pod{live}, func(n string) (time.Duration, bool) {
		a, ok := ages[n]
		return a, ok
	}, time.Minute)
	if len(got) != 1 || got[0] != gone {
		t.Fatalf("stale = %v, want [%s] (not the live one, the young one, or a group the agent did not make)", got, gone)
	}
}
