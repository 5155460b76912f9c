package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/cri"
	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/hotplug"
)

func TestRuntimeID(t *testing.T) {
	if runtimeID("containerd://abc") != "abc" || runtimeID("abc") != "abc" {
		t.Fatal("runtimeID")
	}
}

// runtimeAnswer is a containerRuntime that answers one fixed reply.
type runtimeAnswer struct {
	c   cri.Container
	err error
}

func (r runtimeAnswer) Container(context.Context, string) (cri.Container, error) { return r.c, r.err }

func specIn(cgroupsPath string) *specs.Spec {
	return &specs.Spec{Linux: &specs.Linux{CgroupsPath: cgroupsPath}}
}

// findContainer trusts the runtime's answer only when the kernel lists the
// container's pid in the cgroup its spec names.
func TestFindContainerChecksTheCgroup(t *testing.T) {
	m, err := hotplug.FindMounts("/proc")
	if err != nil {
		t.Skipf("no cgroup mounts here: %v", err)
	}
	gone := cri.Container{PID: os.Getpid(), Spec: specIn("/gpuslice-no-such-cgroup/3f1c2a9e8b7d")}
	cases := []struct {
		name string
		rt   runtimeAnswer
		id   string
	}{
		{"cgroup gone", runtimeAnswer{c: gone}, "3f1c2a9e8b7d"},
		{"unknown", runtimeAnswer{err: fmt.Errorf("x: %w", cri.ErrNotFound)}, "3f1c2a9e8b7d"},
		{"exited", runtimeAnswer{err: cri.ErrNotRunning}, "3f1c2a9e8b7d"},
		{"bad id", runtimeAnswer{c: gone}, "../x"},
		{"empty id", runtimeAnswer{c: gone}, ""},
	}
	for _, tc := range cases {
		if _, err := findContainer(context.Background(), newKnownContainers(tc.rt, 4), m, tc.id); !errors.Is(err, ErrNoContainer) {
			t.Errorf("%s: err = %v, want ErrNoContainer", tc.name, err)
		}
	}
	for name, rt := range map[string]runtimeAnswer{
		"runtime unreachable": {err: errors.New("runtime unreachable")},
		"bad cgroups path":    {c: cri.Container{PID: 1, Spec: specIn("a:b")}},
		"spec without linux":  {c: cri.Container{PID: 1, Spec: &specs.Spec{}}},
	} {
		if _, err := findContainer(context.Background(), newKnownContainers(rt, 4), m, "3f1c2a9e8b7d"); err == nil || errors.Is(err, ErrNoContainer) {
			t.Errorf("%s: err = %v, want an error that is not ErrNoContainer", name, err)
		}
	}
}

// countingRuntime answers with a fixed container and counts the calls.
type countingRuntime struct {
	c     cri.Container
	calls int
}

func (r *countingRuntime) Container(context.Context, string) (cri.Container, error) {
	r.calls++
	return r.c, nil
}

// The runtime is asked once per running container; its answer is used while
// the kernel keeps the pid in the container's cgroup, then asked again.
func TestKnownContainers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a cgroup and moves a process into it")
	}
	m, err := hotplug.FindMounts("/proc")
	if err != nil {
		t.Skipf("no cgroup mounts here: %v", err)
	}
	parent := m.V1Devices
	if parent == "" {
		parent = m.V2
	}
	id := fmt.Sprintf("%d0c0ffee", os.Getpid())
	dir := filepath.Join(parent, "gpuslice-agent-test-"+id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	})
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the cgroup's removal; a no-op once killed below
		_ = sleep.Process.Kill()
		_ = sleep.Wait()
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	spec := specIn("/" + filepath.Base(dir))
	rt := &countingRuntime{c: cri.Container{PID: os.Getpid(), Spec: spec}}
	k := newKnownContainers(rt, 4)
	if _, err := findContainer(context.Background(), k, m, id); !errors.Is(err, ErrNoContainer) || rt.calls != 1 {
		t.Fatalf("a pid outside the cgroup: calls %d, %v", rt.calls, err)
	}
	rt.c.PID = sleep.Process.Pid
	for range 3 {
		c, err := findContainer(context.Background(), k, m, id)
		if err != nil || c.PID != sleep.Process.Pid || c.Cgroup.Dir != dir {
			t.Fatalf("findContainer: %+v, %v", c, err)
		}
	}
	if rt.calls != 2 {
		t.Fatalf("runtime asked %d times for one running container", rt.calls-1)
	}
	k.keep(map[string]bool{"other": true})
	if _, err := findContainer(context.Background(), k, m, id); err != nil || rt.calls != 3 {
		t.Fatalf("after the container left the node: calls %d, %v", rt.calls, err)
	}
	if err := sleep.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = sleep.Wait() // killed: its exit status says so
	if _, err := findContainer(context.Background(), k, m, id); !errors.Is(err, ErrNoContainer) || rt.calls != 4 {
		t.Fatalf("pid gone: calls %d, err %v (want a fresh question, then ErrNoContainer)", rt.calls, err)
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
		func(c *Config) { c.DRA = true }, // with the device plugin on
		func(c *Config) { c.DRA, c.DevicePlugin, c.DRABusyAbove, c.DRABusyBelow = true, false, 80, 80 }, // no hysteresis
		func(c *Config) { c.DRABusyAbove = 101 },
	}
	ok := c
	ok.DRA, ok.DevicePlugin, ok.DRABusyAbove, ok.DRABusyBelow = true, false, 90, 70
	if err := ok.Validate(); err != nil {
		t.Errorf("DRA alone with a busy taint: %v", err)
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
