//go:build nodee2e

package nodee2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuslice/gpuslice/internal/mps"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

const (
	mpsUnits     = 25
	mpsMemory    = 1 << 30
	mpsHeld      = 256 << 20 // the pod's first client holds this much
	mpsServerTot = 96        // M x N x K = 2 x 48 x 1
)

// TestMPS: GPU 0 of the real node in mps mode (the agent runs and supervises
// its MPS control daemon: the simulator's stand-in). A pod of 25 units asking
// for mps runs as MPS clients with what the agent injected (pipe directory
// mounted, thread percentage from units, pinned memory from gpu-memory);
// libgpuslice's hard limit holds for the group; NVML in the pod lists its own
// processes only (not the server); the GPUNode row shows the mode, the live
// clients and the units left, and the server is no unscheduled process. A
// killed server is restarted by the agent and a new client of the pod works
// (make e2e-mps).
func TestMPS(t *testing.T) {
	mpsDir, err := os.MkdirTemp("", "mps") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(mpsDir) })
	ctx, n, ok := privateNode(t, "TestMPS", "--sharing", "0=mps", "--mps-dir", mpsDir)
	if !ok {
		return
	}
	defer n.stop()
	row := n.waitRow(ctx, "mps GPU 0", time.Time{}, func(g *v1alpha2.GPUNode) bool {
		return len(g.Status.GPUs) == numGPUs && g.Status.GPUs[0].SharingMode == api.SharingMPS
	})
	g0 := row.Status.GPUs[0]
	if g0.UnitsTotal != mpsServerTot || g0.MPSClients != 0 || row.Status.GPUs[1].SharingMode == api.SharingMPS {
		t.Fatalf("GPU 0 published as %+v (want mps, %d units, no clients), GPU 1 as %s", g0, mpsServerTot, row.Status.GPUs[1].SharingMode)
	}
	pipe, _, err := mps.Layout(mpsDir, g0.UUID, 0)
	if err != nil {
		t.Fatal(err)
	}
	control := n.mpsControl(ctx, pipe)
	p := n.startMPSPod(ctx)
	n.checkMPSEnv(p, pipe)

	// Its clients are the server's, counted in the row; the server is the agent's.
	server := n.waitClients(ctx, p, control, 2, 0)
	want := min(int64(mpsServerTot-mpsUnits), int64(api.MPSClientLimit-2)*2)
	n.waitRow(bounded(ctx), "counting the pod's 2 MPS clients", time.Now(), func(g *v1alpha2.GPUNode) bool {
		d := g.Status.GPUs[0]
		return d.MPSClients == 2 && d.UnitsFree == want && d.UnscheduledProcesses == 0
	})
	t.Logf("e2e mps: GPU 0 row: 2 live clients, %d of %d units free, server pid %d not unscheduled", want, mpsServerTot, server)
	n.checkMPSHardLimit(p)
	n.checkMPSNVML(p)

	// A killed server: the agent starts a new one and the pod's next client works.
	if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	next := n.waitClients(ctx, p, control, 1, server)
	t.Logf("e2e mps: server %d killed; the agent's new server %d has the pod's new client %v later", server, next, time.Since(killed).Round(time.Millisecond))
	n.waitRow(bounded(ctx), "counting the new server's client", time.Now(), func(g *v1alpha2.GPUNode) bool {
		return g.Status.GPUs[0].MPSClients >= 1
	})
	n.deletePods(ctx, p.Name)
}

// mpsControl sends a command to the MPS control daemon of the pipe
// directory pipe and returns the pids it answers (none while it restarts).
func (n *node) mpsControl(ctx context.Context, pipe string) func(cmd string) []int {
	return func(cmd string) []int {
		n.t.Helper()
		c := exec.CommandContext(ctx, filepath.Join(n.bin, "sim", "gpuslice-sim-mps-control"))
		c.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipe)
		c.Stdin = strings.NewReader(cmd + "\n")
		out, err := c.Output()
		if err != nil {
			return nil // not answering (restarting)
		}
		var pids []int
		for _, f := range strings.Fields(string(out)) {
			var p int
			if _, err := fmt.Sscan(f, &p); err == nil && p > 0 {
				pids = append(pids, p)
			}
		}
		return pids
	}
}

// startMPSPod runs the mps pod on GPU 0: a client holding 256 MiB, and busy
// tenants, each for 2 s, one after another.
func (n *node) startMPSPod(ctx context.Context) *corev1.Pod {
	script := fmt.Sprintf("/gs/gs-memfill --max %d --hold-ms 3600000 >/tmp/fill.json 2>&1 & "+
		"while true; do /gs/gs-tenant --mode busy --kernel-us 500 --seconds 2 >>/tmp/tenant.log 2>&1; sleep 0.1; done", mpsHeld)
	p := sharePod("mps", mpsUnits, mpsMemory, "", "sh", "-c", script)
	p.Annotations[api.AnnotationSharing] = string(api.SharingMPS)
	p = n.createPod(ctx, p)
	p = n.waitPod(bounded(ctx), p.Name, "running", running)
	if a := assignment(p); a == nil || len(a.Containers) != 1 || len(a.Containers[0].GPUs) != 1 || a.Containers[0].GPUs[0].Index != 0 {
		n.t.Fatalf("mps pod assigned %+v, want GPU 0", a)
	}
	return p
}

// checkMPSHardLimit: libgpuslice's hard limit is the group's: a new client
// gets what the first left of 1 GiB.
func (n *node) checkMPSHardLimit(p *corev1.Pod) {
	t := n.t
	out, err := n.execReport(p, "/tmp/fill2.json", "sh", "-c", "/gs/gs-memfill --max 2G >/tmp/fill2.json")
	if err != nil {
		t.Fatalf("gs-memfill in the mps pod: %v\n%s", err, out)
	}
	var fill struct {
		Total     int64  `json:"total"`
		Allocated int64  `json:"allocated"`
		StoppedBy string `json:"stopped_by"`
	}
	if err := json.Unmarshal([]byte(out), &fill); err != nil || fill.Total != mpsMemory || fill.Allocated+mpsHeld > mpsMemory ||
		fill.Allocated < mpsMemory-mpsHeld-(64<<20) || fill.StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Fatalf("gs-memfill beside a 256 MiB client saw %q (%v): want total 1 GiB, at most 768 MiB, stopped by CUDA_ERROR_OUT_OF_MEMORY", out, err)
	}
	t.Logf("e2e mps: hard limit: a second client got %d MiB beside the first's 256 MiB of 1 GiB (%s)", fill.Allocated>>20, fill.StoppedBy)
}

// checkMPSNVML: NVML in the pod lists its own processes by container pid,
// not the server.
func (n *node) checkMPSNVML(p *corev1.Pod) {
	t := n.t
	out, err := n.execReport(p, "/tmp/procs.json", "sh", "-c", "/gs/gs-nvmlprocs --want 2 >/tmp/procs.json")
	if err != nil {
		t.Fatalf("gs-nvmlprocs in the mps pod: %v\n%s", err, out)
	}
	var procs struct {
		Self    uint32   `json:"self"`
		Total   int64    `json:"total"`
		PIDs    []uint32 `json:"pids"`
		Visible []uint32 `json:"visible"`
	}
	// The pod's GPU processes: the memfill holder, itself, and the busy
	// tenant when one is running (it is a member of the group too). Every
	// pid listed must be one the container sees: no server, no host pid.
	err = json.Unmarshal([]byte(out), &procs)
	inPod := err == nil && len(procs.PIDs) >= 2 && len(procs.PIDs) <= 3 && slices.Contains(procs.PIDs, procs.Self)
	for _, pid := range procs.PIDs {
		inPod = inPod && slices.Contains(procs.Visible, pid)
	}
	if !inPod {
		t.Fatalf("NVML in the mps pod: %q (%v): want its processes (memfill, itself, the tenant if running) by container pid", out, err)
	}
	t.Logf("e2e mps: NVML in the pod lists %v (container pids), not the server", procs.PIDs)
}

// checkMPSEnv: the container's first process has the MPS client environment
// the agent injected, and the server's pipe directory is mounted.
func (n *node) checkMPSEnv(p *corev1.Pod, pipe string) {
	t := n.t
	_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	pid, err := n.initPid(id)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(string(b), "\x00")
	pct, _ := mps.ThreadPercentage(mpsUnits, mpsServerTot)
	for _, kv := range []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe, fmt.Sprintf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", pct),
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + mps.PinnedMemLimit(mpsMemory, 1), "GPUSLICE_GATE=off"} {
		if !slices.Contains(env, kv) {
			t.Fatalf("mps pod's environment lacks %s: %q", kv, env)
		}
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s/gpuslice-sim-mps.sock", pid, pipe)); err != nil {
		t.Fatalf("the MPS pipe directory is not mounted in the pod: %v", err)
	}
	t.Logf("e2e mps: pod environment CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%s, pipe directory mounted",
		pct, mps.PinnedMemLimit(mpsMemory, 1))
}

// waitClients waits until the control daemon names one server other than
// old with at least want clients, all in pod p's cgroup; returns its pid.
func (n *node) waitClients(ctx context.Context, p *corev1.Pod, control func(string) []int, want int, old int) int {
	var servers, clients []int
	err := waitFor(bounded(ctx), func() bool {
		servers = control("get_server_list")
		if len(servers) != 1 || servers[0] == old {
			return false
		}
		clients = control(fmt.Sprintf("get_client_list %d", servers[0]))
		if len(clients) < want {
			return false
		}
		for _, c := range clients {
			if _, ok := podOfPid(c, []*corev1.Pod{p}); !ok {
				return false
			}
		}
		return true
	})
	if err != nil {
		n.t.Fatalf("MPS servers %v (old %d), clients %v: want %d clients of the pod: %v\nagent log:\n%s", servers, old, clients, want, err, n.agentTail())
	}
	return servers[0]
}
