package deviceplugin

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/gpuslice/gpuslice/internal/gpuset"
)

const nsEnv = "GPUSLICE_DEVICEPLUGIN_PRIVATE_NS"

// peer is the kubelet's device manager with the pods the "kubelet" works on.
type peer struct {
	m    *devicemanager.ManagerImpl
	mu   sync.Mutex
	pods []*corev1.Pod
}

func (p *peer) active() []*corev1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.pods)
}

func (p *peer) setPods(pods ...*corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods = pods
}

// dmBackend answers Pending from the device manager's own records, the way
// the agent answers it from the kubelet's pod-resources API, and remembers
// the groups it made, as the agent's groups do.
type dmBackend struct {
	peer   *peer
	inject Inject
	mu     sync.Mutex
	made   map[string]bool // group names
}

func (b *dmBackend) Pending(_ context.Context, resource string) ([]Candidate, error) {
	m := b.peer.m
	return Candidates(b.peer.active(), corev1.ResourceName(resource), Records{
		Held: func(p *corev1.Pod, c string, r corev1.ResourceName) (int, bool) {
			devs := m.GetDevices(string(p.UID), c)
			return len(devs), devs[string(r)] != nil
		},
		Made: func(p *corev1.Pod, c string) bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.made[GroupName(Candidate{Name: p.Name, Container: c, UID: p.UID})]
		},
	}), nil
}

func (b *dmBackend) Prepare(_ context.Context, c Candidate, gpus map[string]gpuset.GPU) (*pluginapi.ContainerAllocateResponse, error) {
	b.mu.Lock()
	if b.made == nil {
		b.made = map[string]bool{}
	}
	b.made[GroupName(c)] = true
	b.mu.Unlock()
	return b.inject.Response(c, gpus, GroupName(c))
}

func startManager(t *testing.T, p *peer) {
	t.Helper()
	m, err := devicemanager.NewManagerImpl(klog.Background(), nil, topologymanager.NewFakeManager(klog.Background()))
	if err != nil {
		t.Fatal(err)
	}
	ready := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	if err := m.Start(klog.Background(), p.active, ready, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		t.Fatal(err)
	}
	p.m = m
}

// waitCapacity waits until the device manager has healthy slots of the
// plugin's. 30 s: a kubelet that starts wipes the plugin directory, and a
// plugin whose socket went in that wipe while it was registering waits out
// its registration's 10 s (the kubelet cannot dial it) before it serves and
// registers again (once in 230 runs at load: 'never saw 16 healthy slots'
// with a 10 s wait).
func waitCapacity(t *testing.T, m *devicemanager.ManagerImpl, healthy int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		capacity, alloc, _ := m.GetCapacity(klog.Background())
		q, ok := alloc[res]
		if _, okc := capacity[res]; okc && ok && q.Value() == healthy {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, alloc, _ := m.GetCapacity(klog.Background())
	t.Fatalf("device manager never saw %d healthy slots: %v", healthy, alloc)
}

func fourGPUs(healthy ...bool) []gpuset.GPU {
	var out []gpuset.GPU
	for i := range int32(4) {
		out = append(out, gpuset.GPU{Index: i, UUID: uuid(i), Minor: uint32(i), Healthy: len(healthy) == 0 || healthy[i]})
	}
	return out
}

// TestDeviceManagerPeer runs the plugin against the kubelet's own device
// manager (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager), whose socket
// directory is fixed: the test re-executes itself in a private mount
// namespace with a tmpfs on /var/lib.
func TestDeviceManagerPeer(t *testing.T) {
	if os.Getenv(nsEnv) == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root: the kubelet's device manager listens in /var/lib/kubelet (private mount namespace)")
		}
		cmd := exec.Command("unshare", "-m", "--propagation", "private", os.Args[0], "-test.run=^TestDeviceManagerPeer$", "-test.v")
		cmd.Env = append(os.Environ(), nsEnv+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a private mount namespace:\n%s", out)
		if err != nil {
			t.Fatalf("re-executed test: %v", err)
		}
		if !strings.Contains(string(out), "--- PASS: TestDeviceManagerPeer") {
			t.Fatal("re-executed test did not pass")
		}
		return
	}
	if err := unix.Mount("tmpfs", "/var/lib", "tmpfs", 0, "mode=755"); err != nil {
		t.Fatalf("tmpfs on /var/lib: %v", err)
	}
	if err := os.MkdirAll(pluginapi.DevicePluginPath, 0o755); err != nil {
		t.Fatal(err)
	}
	runPeerScenario(t)
}

func runPeerScenario(t *testing.T) {
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(tctx)
	defer cancel()
	p := &peer{}
	startManager(t, p)
	be := &dmBackend{peer: p, inject: Inject{DevRoot: "/dev", RunDir: "/run/gpuslice"}}
	cfg := Config{ResourceName: string(res), PluginDir: pluginapi.DevicePluginPath, SocketName: "gpuslice.sock", SlotsPerGPU: 4, CheckEvery: 50 * time.Millisecond}
	plug, err := New(cfg, be, fourGPUs())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- plug.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitCapacity(t, p.m, 16)

	a := pod("a", []int64{2}, [][]int32{{1, 3}})
	p.setPods(a)
	if err := p.m.Allocate(context.Background(), a, &a.Spec.Containers[0], lifecycle.AddOperation); err != nil {
		t.Fatalf("allocate a: %v", err)
	}
	expectDevices(t, p.m, a, "/dev/nvidia1", "/dev/nvidia3")
	slots := p.m.GetDevices(string(a.UID), "c0")[string(res)]
	var onGPU []string
	for id := range slots {
		u, _, _ := ParseSlotID(id)
		onGPU = append(onGPU, u)
	}
	slices.Sort(onGPU)
	if !slices.Equal(onGPU, []string{uuid(1), uuid(3)}) {
		t.Fatalf("kubelet recorded slots %v", slots)
	}

	// Two containers waiting at once: refuse rather than guess.
	b, c := pod("b", []int64{1}, [][]int32{{0}}), pod("c", []int64{1}, [][]int32{{2}})
	p.setPods(a, b, c)
	if err := p.m.Allocate(context.Background(), b, &b.Spec.Containers[0], lifecycle.AddOperation); err == nil || !strings.Contains(err.Error(), "refusing to guess") {
		t.Fatalf("ambiguous allocation: err = %v", err)
	}
	p.setPods(a, b)
	if err := p.m.Allocate(context.Background(), b, &b.Spec.Containers[0], lifecycle.AddOperation); err != nil {
		t.Fatalf("allocate b: %v", err)
	}
	expectDevices(t, p.m, b, "/dev/nvidia0")

	// No assignment: no devices.
	bare := pod("bare", []int64{1}, nil)
	p.setPods(a, b, bare)
	if err := p.m.Allocate(context.Background(), bare, &bare.Spec.Containers[0], lifecycle.AddOperation); err == nil || !strings.Contains(err.Error(), "no gpuslice assignment") {
		t.Fatalf("pod without assignment: err = %v", err)
	}

	peerFinishing(t, p, a, b)
	peerUnits(t, ctx, p, be, a, b)
	peerFailures(t, p, plug)
}

// peerFinishing: a pod whose containers have all exited is inactive for a
// moment (its terminal status is set before its worker marks it
// terminating): the device manager drops its devices then
// (UpdateAllocatedDevices, which every pod-resources List and allocation
// runs), and it is listed again, holding nothing, while it terminates. The
// next pod of the same size is allocated its own GPU and group, not refused
// as ambiguous with the finishing one and never given its group.
func peerFinishing(t *testing.T, p *peer, running ...*corev1.Pod) {
	f := pod("f", []int64{1}, [][]int32{{2}})
	p.setPods(append(slices.Clone(running), f)...)
	if err := p.m.Allocate(context.Background(), f, &f.Spec.Containers[0], lifecycle.AddOperation); err != nil {
		t.Fatalf("allocate f: %v", err)
	}
	p.setPods(running...) // f's terminal status is set; its worker has not yet marked it terminating
	p.m.UpdateAllocatedDevices(klog.Background())
	if devs := p.m.GetDevices(string(f.UID), "c0"); len(devs) != 0 {
		t.Fatalf("the device manager kept the finishing pod's devices %v", devs)
	}
	g := pod("g", []int64{1}, [][]int32{{1}})
	p.setPods(append(slices.Clone(running), f, g)...) // f terminating: active again
	if err := p.m.Allocate(context.Background(), g, &g.Spec.Containers[0], lifecycle.AddOperation); err != nil {
		t.Fatalf("allocate g beside the finishing f: %v", err)
	}
	expectDevices(t, p.m, g, "/dev/nvidia1")
	if file := groupFileOf(t, p.m, g); !strings.Contains(file, GroupName(Candidate{Name: g.Name, Container: "c0", UID: g.UID})) {
		t.Fatalf("g got group file %s, not its own group's", file)
	}
	p.setPods(running...)
}

// groupFileOf is the group state file the device manager gives p's
// container c0 (GPUSLICE_GROUP_FILE).
func groupFileOf(t *testing.T, m *devicemanager.ManagerImpl, p *corev1.Pod) string {
	t.Helper()
	opts, err := m.GetDeviceRunContainerOptions(context.Background(), p, &p.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range opts.Envs {
		if e.Name == "GPUSLICE_GROUP_FILE" {
			return e.Value
		}
	}
	t.Fatalf("%s: no group file in %v", p.Name, opts.Envs)
	return ""
}

// peerFailures: unhealthy GPUs and a restarted kubelet.
func peerFailures(t *testing.T, p *peer, plug *Plugin) {
	a, b := pod("a", []int64{2}, [][]int32{{1, 3}}), pod("b", []int64{1}, [][]int32{{0}})
	// An unhealthy assigned GPU has no slot to give.
	plug.SetGPUs(fourGPUs(true, true, false, true))
	waitCapacity(t, p.m, 12)
	d := pod("d", []int64{1}, [][]int32{{2}})
	p.setPods(a, b, d)
	if err := p.m.Allocate(context.Background(), d, &d.Spec.Containers[0], lifecycle.AddOperation); err == nil {
		t.Fatal("allocated on an unhealthy GPU")
	}
	plug.SetGPUs(fourGPUs())
	waitCapacity(t, p.m, 16)

	// The kubelet restarts (new manager, plugin directory wiped): the
	// plugin registers again.
	if err := p.m.Stop(klog.Background()); err != nil {
		t.Fatal(err)
	}
	startManager(t, p)
	waitCapacity(t, p.m, 16)
	e := pod("e", []int64{1}, [][]int32{{2}})
	p.setPods(e)
	if err := p.m.Allocate(context.Background(), e, &e.Spec.Containers[0], lifecycle.AddOperation); err != nil {
		t.Fatalf("allocate after kubelet restart: %v", err)
	}
	expectDevices(t, p.m, e, "/dev/nvidia2")
	// The plugin serves on its socket again, while the kubelet runs: once the
	// kubelet stops, the plugin's next check sees it gone and serves anew
	// (its socket is away between tries), so a look after Stop raced it.
	if _, err := os.Stat(filepath.Join(pluginapi.DevicePluginPath, "gpuslice.sock")); err != nil {
		t.Fatalf("plugin socket: %v", err)
	}
	if err := p.m.Stop(klog.Background()); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

func expectDevices(t *testing.T, m *devicemanager.ManagerImpl, p *corev1.Pod, want ...string) {
	t.Helper()
	opts, err := m.GetDeviceRunContainerOptions(context.Background(), p, &p.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range opts.Devices {
		got = append(got, d.PathInContainer)
		if d.PathOnHost != d.PathInContainer || d.Permissions != "rw" {
			t.Errorf("device %+v", d)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s gets devices %v, want %v", p.Name, got, want)
	}
	// The limit is the group's (its state file, written by the time-slice
	// daemon), not the environment's: the container gets its group file.
	var file string
	for _, e := range opts.Envs {
		if e.Name == "GPUSLICE_MEMORY_LIMIT" {
			t.Errorf("%s: a memory limit in the environment: %v", p.Name, e)
		}
		if e.Name == "GPUSLICE_GROUP_FILE" {
			file = e.Value
		}
	}
	if file == "" {
		t.Fatalf("%s: no group file in %v", p.Name, opts.Envs)
	}
}
