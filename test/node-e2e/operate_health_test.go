//go:build nodee2e

package nodee2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// gpuHealth is one ListAndWatch message: health per GPU UUID (every slot of
// a GPU must agree).
type gpuHealth map[string]string

// watchPlugin opens a ListAndWatch stream on the agent's gpuslice.io/gpu
// plugin, as the kubelet does, and returns its messages.
func (n *node) watchPlugin(ctx context.Context) <-chan gpuHealth {
	conn, err := grpc.NewClient("unix://"+filepath.Join(pluginapi.DevicePluginPath, "gpuslice.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.t.Fatal(err)
	}
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		n.t.Fatal(err)
	}
	out := make(chan gpuHealth, 16)
	go func() {
		defer close(out)
		defer conn.Close()
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			h := gpuHealth{}
			for _, d := range resp.Devices {
				uuid, _, err := deviceplugin.ParseSlotID(d.ID)
				if err != nil {
					h["bad slot id "+d.ID] = d.Health
					continue
				}
				if prev, seen := h[uuid]; seen && prev != d.Health {
					h[uuid] = "mixed"
					continue
				}
				h[uuid] = d.Health
			}
			out <- h
		}
	}()
	return out
}

func (n *node) simCtl(args ...string) {
	if out, err := exec.Command(filepath.Join(n.bin, "sim", "gpuslice-sim-ctl"), args...).CombinedOutput(); err != nil {
		n.t.Fatalf("gpuslice-sim-ctl %v: %v\n%s", args, err, out)
	}
}

// checkHealth: an application XID (13) on the tenant's GPU changes nothing;
// a critical XID (79) on another GPU withdraws it from ListAndWatch (timed
// from the injection to the message: the figure returned), the GPUNode row
// says why, the metrics count it, and new whole-GPU pods land only on healthy
// GPUs. Last, an XID on every GPU left makes the node NotReady, saying why.
func (n *node) checkHealth(ctx context.Context, p *corev1.Pod) time.Duration {
	t := n.t
	mine := opGPU(p).UUID
	victim := n.opOtherGPUs(mine)[0]
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	t0, withdrawn := n.checkWithdrawn(ctx, n.watchPlugin(wctx), mine, victim)
	row := n.waitRow(ctx, "showing the XID", time.Time{}, func(g *v1alpha2.GPUNode) bool {
		for _, x := range g.Status.GPUs {
			if x.UUID == victim {
				return x.Health == v1alpha2.GPUUnhealthy
			}
		}
		return false
	})
	rowAfter := time.Since(t0)
	for _, x := range row.Status.GPUs {
		switch {
		case x.UUID == victim && !strings.HasPrefix(x.HealthMessage, "XID 79 (GPU has fallen off the bus) at "):
			t.Fatalf("GPU %s healthMessage %q", victim, x.HealthMessage)
		case x.UUID != victim && x.Health != v1alpha2.GPUHealthy:
			t.Fatalf("GPU %s unhealthy too: %+v", x.UUID, x)
		}
	}
	if row.Status.State != v1alpha2.NodeWorking || !strings.Contains(row.Status.Message, victim) {
		t.Fatalf("node state %s, message %q: want Working, naming %s", row.Status.State, row.Status.Message, victim)
	}
	m := n.opScrape()
	if m["gpuslice_gpu_healthy"][victim] != 0 || m["gpuslice_gpu_healthy"][mine] != 1 || m["gpuslice_gpu_unhealthy_events_total"]["xid/"+victim] != 1 {
		t.Fatalf("health metrics: healthy %v, events %v", m["gpuslice_gpu_healthy"], m["gpuslice_gpu_unhealthy_events_total"])
	}
	t.Logf("e2e health: XID 79 on %s withdrew it from ListAndWatch %v after the injection, the GPUNode row said why %v after: %q",
		victim, withdrawn.Round(time.Microsecond), rowAfter.Round(time.Millisecond), row.Status.Message)
	n.checkPlacement(ctx, victim, mine)
	n.checkNotReady(ctx, victim, t0)
	return withdrawn
}

// checkWithdrawn: with every GPU healthy in ListAndWatch (msgs), an
// application XID (13) on GPU mine changes nothing and a critical one (79)
// on victim withdraws it. It returns when the XID 79 was injected and how
// long the withdrawal took.
func (n *node) checkWithdrawn(ctx context.Context, msgs <-chan gpuHealth, mine, victim string) (time.Time, time.Duration) {
	t := n.t
	recv := func(what string) gpuHealth {
		select {
		case h, ok := <-msgs:
			if !ok {
				t.Fatalf("ListAndWatch stream ended waiting for %s", what)
			}
			return h
		case <-ctx.Done():
			t.Fatalf("no ListAndWatch message for %s", what)
		}
		return nil
	}
	first := recv("the first list")
	for _, g := range n.gpus {
		if first[g.UUID] != pluginapi.Healthy {
			t.Fatalf("before any XID: %v", first)
		}
	}
	n.simCtl("xid", mine, "13")
	t0 := time.Now()
	n.simCtl("xid", victim, "79")
	for {
		h := recv("GPU " + victim + " withdrawn")
		if h[mine] != pluginapi.Healthy {
			t.Fatalf("XID 13 (an application's) withdrew the tenant's GPU %s: %v", mine, h)
		}
		if h[victim] == pluginapi.Unhealthy {
			return t0, time.Since(t0)
		}
	}
}

// checkNotReady: an XID on every GPU left but victim leaves no healthy
// GPU: the node is NotReady, saying why.
func (n *node) checkNotReady(ctx context.Context, victim string, since time.Time) {
	for _, u := range n.opOtherGPUs(victim) {
		n.simCtl("xid", u, "48")
	}
	row := n.waitRow(ctx, "NotReady", since, func(g *v1alpha2.GPUNode) bool { return g.Status.State == v1alpha2.NodeNotReady })
	if !strings.HasPrefix(row.Status.Message, "no healthy GPU; ") || !opContains(row.Status.Message, "XID 48", "XID 79") {
		n.t.Fatalf("NotReady message %q", row.Status.Message)
	}
	n.t.Logf("e2e health: XID 48 on the other GPUs: the node is NotReady: %q", row.Status.Message)
}

// checkPlacement: with one GPU withdrawn and one holding the tenant's share,
// two whole-GPU pods run on the two healthy free GPUs and a third finds no
// GPU (the scheduler says so); none lands on the withdrawn one.
func (n *node) checkPlacement(ctx context.Context, victim, mine string) {
	t := n.t
	var used []string
	for i := range 2 {
		w := n.createPod(ctx, gpuPod(fmt.Sprintf("whole-%d", i), 1, 0, "", "/probe"))
		w = n.waitPod(ctx, w.Name, "running", running)
		u := opGPU(w).UUID
		if u == victim || u == mine || slices.Contains(used, u) {
			t.Fatalf("whole-GPU pod %s landed on %s (withdrawn %s, tenant's %s, taken %v)", w.Name, u, victim, mine, used)
		}
		used = append(used, u)
	}
	w := n.createPod(ctx, gpuPod("whole-2", 1, 0, "", "/probe"))
	w = n.waitPod(ctx, w.Name, "found unschedulable", func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})
	if w.Spec.NodeName != "" {
		t.Fatalf("whole-2 bound to %s", w.Spec.NodeName)
	}
	t.Logf("e2e health: whole-GPU pods ran on %v; the third found no healthy free GPU", used)
}
