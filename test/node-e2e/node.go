//go:build nodee2e

package nodee2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/ociimage"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

const (
	nodeName  = "gs-e2e-node"
	scheduler = "gpuslice"
	image     = "gpuslice.local/e2e:1"
	pauseImg  = "gpuslice.local/pause:1"
	numGPUs   = 4
)

// node is one real node and its control plane, all started by the test.
type node struct {
	t          *testing.T
	dir, bin   string
	cp         *harness.ControlPlane
	procs      []*harness.Process
	ctrSock    string
	stateDir   string // containerd task state (OCI config.json of containers)
	cgroupRoot string // the kubelet's and the agent's (cgroups.go)
	podLogs    string
	gpus       []gpu.Device
	agent      *exec.Cmd
	agentDone  chan struct{}
	agentLog   string
	agentFlags []string
	execs      int
	// metrics is the agent's /metrics, /healthz and /readyz address.
	metrics string
	// simState is the simulated GPU's state file (default dir/sim.state).
	simState string
	// extraImages are OCI archives imported into containerd besides the
	// test images; nodeLabels are the kubelet's --node-labels.
	extraImages []string
	nodeLabels  string
	// cdiDir, where set, is given to containerd as its CDI spec directory
	// (enable_cdi: containerd 1.7 or later on PATH, see dra.go).
	cdiDir string
	// groupFor, where set, names a pod's time-slice group (groupName).
	groupFor func(*corev1.Pod) string
	// agentPath, where set, is the agent binary started instead of
	// bin/gpuslice-node, with agentEnv added to its environment.
	agentPath string
	agentEnv  []string
	// simEnv, where set, overrides the simulated GPUs' settings (simGPUs);
	// sliceDevices, where set, is the number of devices the DRA node's
	// ResourceSlices hold once published (numGPUs otherwise).
	simEnv       map[string]string
	sliceDevices int
	// extraAgentFlags are added to the DRA node's agent flags.
	extraAgentFlags []string
}

// freeAddr picks a free loopback TCP address (other nodes' agents may run
// on this machine at the same time).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func need(t *testing.T, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		t.Fatalf("%s is not set (run through make e2e-hotplug)", env)
	}
	return v
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// newNode starts the control plane (etcd, kube-apiserver) of a node whose
// other parts the caller starts, and makes the node's cgroup root.
func newNode(t *testing.T, ctx context.Context, o harness.Options) (*node, harness.Binaries) {
	n := &node{t: t, bin: need(t, "GPUSLICE_BIN")}
	bins, err := harness.FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	if n.dir, err = os.MkdirTemp("", "gpuslice-node-e2e-"); err != nil {
		t.Fatal(err)
	}
	t.Logf("e2e: logs and state in %s", n.dir)
	n.cgroupRoot = "/" + filepath.Base(n.dir)
	if err := makeCgroupRoot(n.cgroupRoot); err != nil {
		t.Fatal(err)
	}
	if err := joinCgroupRoot(n.cgroupRoot); err != nil {
		t.Fatal(err)
	}
	if n.cp, err = harness.StartControlPlaneWith(ctx, bins, n.dir, o); err != nil {
		t.Fatal(err)
	}
	return n, bins
}

// startNodeWith brings everything up (gpuslice-scheduler with schedArgs and
// the agent with agentFlags added); stop takes it down.
func startNodeWith(t *testing.T, ctx context.Context, schedArgs []string, agentFlags ...string) *node {
	kubelet := need(t, "GPUSLICE_KUBELET")
	n, _ := newNode(t, ctx, harness.Options{})
	if err := n.cp.InstallCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	// Share pods here run busy kernels on purpose: the GPU's measured
	// utilization (published by the agent a moment later) must not decide
	// where the next share pod goes, or placement depends on timing.
	sp, err := n.cp.StartScheduler(ctx, filepath.Join(n.bin, "gpuslice-scheduler"), "scheduler",
		harness.SchedulerOptions{SchedulerName: scheduler, GPUSlice: true, Args: "{heartbeatTimeout: 1h, utilizationThreshold: 100}",
			ExtraArgs: schedArgs})
	if err != nil {
		t.Fatal(err)
	}
	n.procs = append(n.procs, sp)
	n.simGPUs()
	n.images()
	n.startContainerd(ctx)
	n.startKubelet(ctx, kubelet)
	n.agentFlags = []string{"--node-name", nodeName, "--kubeconfig", n.cp.Kubeconfig, "--driver", "sim",
		"--sim-dir", filepath.Join(n.bin, "sim"), "--library", filepath.Join(n.bin, "libgpuslice.so"),
		"--run-dir", filepath.Join(n.dir, "run"), "--socket", filepath.Join(n.dir, "run", "node.sock"),
		"--dev-root", filepath.Join(n.dir, "dev"), "--control-devices", "", "--resync", "1s", "--publish-period", "1s",
		"--runtime-endpoint", "unix://" + n.ctrSock, "-v", "2"}
	n.agentFlags = append(n.agentFlags, agentFlags...)
	n.metrics = freeAddr(t)
	n.agentFlags = append(n.agentFlags, "--metrics-address", n.metrics, "--cdi-spec-dir", filepath.Join(n.dir, "cdi"))
	n.agentLog = filepath.Join(n.dir, "gpuslice-node.log")
	n.startAgent()
	// The agent publishes the node's GPUNode row; the scheduler needs it.
	n.waitRow(ctx, "published", time.Time{}, func(g *v1alpha2.GPUNode) bool { return len(g.Status.GPUs) == numGPUs })
	return n
}

// simGPUs sets the simulated GPU up for every process of the test and makes
// the host device nodes (c 195:N, no driver behind them). Contexts take no
// memory here (the agent passes GPUSLICE_SIM_* on to containers): these tests
// assert exact shares of pods' limits; that a context counts is tested in
// test/e2e, test/gpu and the library's tests.
func (n *node) simGPUs() {
	t := n.t
	if n.simState == "" {
		n.simState = filepath.Join(n.dir, "sim.state")
	}
	for k, v := range map[string]string{"GPUSLICE_SIM_GPUS": strconv.Itoa(numGPUs), "GPUSLICE_SIM_MEMORY": "16GiB",
		"GPUSLICE_SIM_STATE": n.simState, "GPUSLICE_SIM_CONTEXT_MEMORY": "0"} {
		if err := os.Setenv(k, v); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range n.simEnv {
		t.Setenv(k, v) // restored once the test ends: the next test's node is not this one's
	}
	drv, err := gpu.OpenDriver(gpu.ModeSim, filepath.Join(n.bin, "sim"))
	if err != nil {
		t.Fatal(err)
	}
	n.gpus, err = gpu.Devices(drv.NVML)
	if serr := drv.NVML.Shutdown(); err == nil {
		err = serr
	}
	if err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(n.dir, "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, g := range n.gpus {
		if err := unix.Mknod(filepath.Join(dev, "nvidia"+strconv.Itoa(g.Minor)), unix.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(g.Minor)))); err != nil {
			t.Fatal(err)
		}
	}
}

func (n *node) images() {
	t := n.t
	for _, p := range []string{"probe", "pause"} {
		run(t, "gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-static", "-o", filepath.Join(n.dir, p), filepath.Join("images", p+".c"))
	}
	for _, p := range []string{"nvmlprocs", "devcount"} {
		run(t, "gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror", "-I", filepath.Join("..", "..", "include"),
			"-o", filepath.Join(n.dir, "gs-"+p), filepath.Join("images", p+".c"), "-ldl")
	}
	// The simulated GPU's per-process busy time, read on the host.
	run(t, "gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror", "-I", filepath.Join("..", "..", "simgpu", "src"),
		"-o", filepath.Join(n.dir, "gs-simbusy"), filepath.Join("host", "simbusy.c"))
	files := ociimage.Files{"/pause": filepath.Join(n.dir, "pause")}
	if err := buildImage(filepath.Join(n.dir, "pause.tar"), pauseImg, files, []string{"/pause"}); err != nil {
		t.Fatal(err)
	}
	files = ociimage.Files{"/probe": filepath.Join(n.dir, "probe"), "/bin/busybox": "/bin/busybox"}
	for _, p := range []string{"gs-nvmlprocs", "gs-devcount"} {
		if err := files.AddWithLibs("/gs/"+p, filepath.Join(n.dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"gs-memfill", "gs-tenant", "libgpuslice.so", "sim/libcuda.so.1", "sim/libnvidia-ml.so.1"} {
		if err := files.AddWithLibs("/gs/"+f, filepath.Join(n.bin, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := buildImage(filepath.Join(n.dir, "e2e.tar"), image, files, []string{"/probe"}); err != nil {
		t.Fatal(err)
	}
}

func (n *node) startContainerd(ctx context.Context) {
	t := n.t
	root := filepath.Join(n.dir, "containerd")
	n.ctrSock = filepath.Join(root, "containerd.sock")
	n.stateDir = filepath.Join(root, "state")
	n.podLogs = filepath.Join(n.dir, "pod-logs")
	cni := filepath.Join(n.dir, "cni")
	for _, d := range []string{root, cni, n.podLogs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
`, filepath.Join(root, "root"), n.stateDir, n.ctrSock, pauseImg, cni)
	if n.cdiDir != "" {
		cfg = strings.Replace(cfg, "  restrict_oom_score_adj = true\n",
			fmt.Sprintf("  restrict_oom_score_adj = true\n  enable_cdi = true\n  cdi_spec_dirs = [%q]\n", n.cdiDir), 1)
	}
	path := filepath.Join(root, "config.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := harness.Start(n.dir, "containerd", "containerd", "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	n.procs = append(n.procs, p)
	if err := harness.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		_, err := os.Stat(n.ctrSock)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("containerd: %v\n%s", err, p.Tail())
	}
	imgs := append([]string{filepath.Join(n.dir, "pause.tar"), filepath.Join(n.dir, "e2e.tar")}, n.extraImages...)
	for _, img := range imgs {
		run(t, "ctr", "--address", n.ctrSock, "-n", "k8s.io", "images", "import", img)
	}
}

func (n *node) startKubelet(ctx context.Context, kubelet string) {
	t := n.t
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
failSwapOn: false
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzPort: 0
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
localStorageCapacityIsolation: false
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
syncFrequency: 5s
`, n.cgroupRoot, port, n.ctrSock, n.podLogs)
	path := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", path, "--kubeconfig", n.cp.Kubeconfig, "--hostname-override", nodeName, "--node-ip", "127.0.0.1", "-v", "1"}
	if n.nodeLabels != "" {
		args = append(args, "--node-labels", n.nodeLabels)
	}
	p, err := harness.Start(n.dir, "kubelet", kubelet, args...)
	if err != nil {
		t.Fatal(err)
	}
	n.procs = append(n.procs, p)
	if err := harness.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		if exited, err := p.Exited(); exited {
			return false, fmt.Errorf("kubelet exited: %w", err)
		}
		_, err := n.cp.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("kubelet: %v\n%s", err, p.Tail())
	}
}

func (n *node) startAgent() {
	t := n.t
	f, err := os.OpenFile(n.agentLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	path, flags := n.agentPath, n.agentFlags
	if path == "" {
		path = filepath.Join(n.bin, "gpuslice-node")
	} else { // its daemon is the release one, not beside it
		flags = append(slices.Clone(flags), "--daemon-binary", filepath.Join(n.bin, "gpuslice"))
	}
	cmd := exec.Command(path, flags...)
	if len(n.agentEnv) > 0 {
		cmd.Env = append(os.Environ(), n.agentEnv...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // killed on purpose in the restart test
		_ = f.Close()
		close(done)
	}()
	n.agent, n.agentDone = cmd, done
}

// killAgent kills the agent with SIGKILL (no cleanup of any kind).
func (n *node) killAgent() {
	if n.agent == nil {
		return
	}
	_ = syscall.Kill(-n.agent.Process.Pid, syscall.SIGKILL)
	<-n.agentDone
	n.agent = nil
}

// killDaemon kills the time-slice daemon the agent supervised: it runs in a
// session of its own (it outlives a killed agent, as in a container until
// the container ends), so killing the agent's process group leaves it.
func (n *node) killDaemon() {
	st, err := nodestatus.Read(filepath.Join(n.dir, "run"))
	if err != nil || st.PID <= 0 {
		return
	}
	if err := client.StopPID(st.PID, unix.SIGKILL, 10*time.Second); err != nil {
		n.t.Logf("e2e: %v", err)
	}
}

// stop deletes the pods (so the kubelet stops their containers), removes
// what containerd still holds, and stops every process.
func (n *node) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if n.cp != nil {
		zero := int64(0)
		_ = n.cp.Client.CoreV1().Pods("e2e").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		_ = harness.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
			l, err := n.cp.Client.CoreV1().Pods("e2e").List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == 0, nil
		})
	}
	n.killAgent()
	n.killDaemon()
	for i := len(n.procs) - 1; i >= 0; i-- {
		if n.procs[i].Name == "containerd" {
			n.removeContainers()
		}
		n.procs[i].Stop()
	}
	if n.cp != nil {
		n.cp.Stop()
	}
	leaveCgroupRoot()
	removeCgroupRoot(n.cgroupRoot)
	if !n.t.Failed() {
		unmountUnder(n.dir)
		if err := os.RemoveAll(n.dir); err != nil {
			n.t.Logf("e2e: remove %s: %v", n.dir, err)
		}
	}
}

func (n *node) removeContainers() {
	ctr := func(args ...string) string {
		out, _ := exec.Command("ctr", append([]string{"--address", n.ctrSock, "-n", "k8s.io"}, args...)...).Output()
		return string(out)
	}
	for _, id := range strings.Fields(ctr("containers", "ls", "-q")) {
		ctr("tasks", "kill", "-s", "SIGKILL", id)
		ctr("tasks", "rm", "-f", id)
		ctr("containers", "rm", id)
	}
}

// unmountUnder detaches every mount below dir (containerd's sandbox shm and
// rootfs mounts in this private mount namespace), deepest first.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = unix.Unmount(points[i], unix.MNT_DETACH) // best effort: the namespace goes with the test anyway
	}
}
