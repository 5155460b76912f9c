//go:build integration

package integration

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// TestSchedulesWholeAndShares: the real scheduler with our plugin binds
// whole-GPU and fractional pods and annotates each with its GPUs first.
func TestSchedulesWholeAndShares(t *testing.T) {
	e, ns := setup(t)
	e.nodes(t, ns+"-n", 2, 2)
	e.startScheduler(t, ns+"-sched", `{placement: binpack}`)
	// One at a time, so the placement each sees is deterministic.
	pods := map[string]*corev1.Pod{}
	for _, p := range []struct {
		name string
		r    harness.GPURequest
	}{
		{"whole", harness.GPURequest{GPUs: 1}},
		{"half", harness.GPURequest{Units: 50, Memory: 4 * harness.GiB}},
		{"third", harness.GPURequest{Units: 30, Memory: 2 * harness.GiB}},
		{"two", harness.GPURequest{GPUs: 2, Units: 10}},
	} {
		e.createPod(t, ns, p.name, ns+"-sched", p.r)
		pods[p.name] = e.waitBound(t, ns, p.name)[p.name]
	}
	w := assignment(t, pods["whole"])
	if g := w.Containers[0].GPUs; len(g) != 1 || !g[0].Exclusive || g[0].Units != 100 || g[0].MemoryBytes != 16*harness.GiB {
		t.Fatalf("whole: %+v", g)
	}
	h, th := assignment(t, pods["half"]), assignment(t, pods["third"])
	if g := h.Containers[0].GPUs; len(g) != 1 || g[0].Units != 50 || g[0].MemoryBytes != 4*harness.GiB {
		t.Fatalf("half: %+v", g)
	}
	// binpack: the second share lands on the same GPU as the first.
	if h.Node != th.Node || h.Containers[0].GPUs[0].Index != th.Containers[0].GPUs[0].Index {
		t.Fatalf("binpack split shares: %+v / %+v", h, th)
	}
	if g := assignment(t, pods["two"]).Containers[0].GPUs; len(g) != 2 || g[0].Index == g[1].Index {
		t.Fatalf("two: %+v", g)
	}
	e.checkBooks(t, ns, ns+"-n")

	out, err := exec.Command(e.bins.Path("kubectl"), "--kubeconfig", e.cp.Kubeconfig, "get", "gpunodes", ns+"-n-0").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get gpunodes: %v\n%s", err, out)
	}
	for _, col := range []string{"STATE", "GPUS", "UNITS-FREE", "MEM-FREE", "UPDATED", "32Gi", "Working", "gpuslice simulated GPU"} {
		if !strings.Contains(string(out), col) {
			t.Fatalf("kubectl get gpunodes lacks %q:\n%s", col, out)
		}
	}
}

// TestMalformedRequestsGetEvents: bad requests get a clear Event, stay
// pending, and do not disturb good pods.
func TestMalformedRequestsGetEvents(t *testing.T) {
	e, ns := setup(t)
	e.nodes(t, ns+"-n", 1, 1)
	sched := ns + "-sched"
	e.startScheduler(t, sched, staticRows)
	e.createPod(t, ns, "typo", sched, harness.GPURequest{}, func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpuslice.io/gpus": *resourceQty(1)}
	})
	e.createPod(t, ns, "placement", sched, harness.GPURequest{Units: 10}, func(p *corev1.Pod) {
		p.Annotations = map[string]string{api.AnnotationPlacement: "tightest"}
	})
	e.createPod(t, ns, "good", sched, harness.GPURequest{Units: 10})
	e.waitBound(t, ns, "good")
	if note := e.waitEvent(t, ns, "typo", "InvalidGPURequest"); !strings.Contains(note, "unknown resource gpuslice.io/gpus") {
		t.Fatalf("typo event: %q", note)
	}
	if note := e.waitEvent(t, ns, "placement", "InvalidGPURequest"); !strings.Contains(note, `"tightest"`) {
		t.Fatalf("placement event: %q", note)
	}
	e.stayPending(t, ns, "typo", 0)
	e.stayPending(t, ns, "placement", 0)
	e.checkBooks(t, ns, ns+"-n")
}

func resourceQty(v int64) *resource.Quantity { return resource.NewQuantity(v, resource.DecimalSI) }

// TestExcludesUnhealthyBusyDrainingStale: such GPUs and nodes are never
// chosen; a pod waits until a usable GPU appears.
func TestExcludesUnhealthyBusyDrainingStale(t *testing.T) {
	e, ns := setup(t)
	specs := e.nodes(t, ns+"-n", 5, 1)
	ctx := context.Background()
	now := time.Now()
	muts := []func(*v1alpha2.GPUNode){
		func(g *v1alpha2.GPUNode) { g.Status.GPUs[0].Health = v1alpha2.GPUUnhealthy },
		func(g *v1alpha2.GPUNode) { g.Status.GPUs[0].UtilizationPercent = 99 },
		func(g *v1alpha2.GPUNode) { g.Status.GPUs[0].UnscheduledProcesses = 1 },
		func(g *v1alpha2.GPUNode) { g.Status.State = v1alpha2.NodeDraining },
		nil, // its agent's Lease expired
	}
	for i, m := range muts {
		if m == nil {
			if err := harness.PutLease(ctx, e.cp.Client, specs[i].Name, now.Add(-time.Hour), 40*time.Second); err != nil {
				t.Fatal(err)
			}
			continue
		}
		g := specs[i].GPUNode(now)
		m(g)
		if err := harness.PutGPUNode(ctx, e.cp.GPUNodes, g); err != nil {
			t.Fatal(err)
		}
	}
	sched := ns + "-sched"
	e.startScheduler(t, sched, `{utilizationThreshold: 90, heartbeatTimeout: 30s}`)
	e.createPod(t, ns, "p", sched, harness.GPURequest{Units: 10})
	e.stayPending(t, ns, "p", 3*time.Second)
	// Every node's reason is reported (after a first cycle on the best
	// candidate nodes, which here belong to other tests, the pod is tried
	// on every node).
	e.waitEventWith(t, ns, "p", "FailedScheduling", "unhealthy", "utilization threshold", "unscheduled processes", "Draining", "Lease expired")
	// The busy GPU calms down: the GPUNode update requeues the pod.
	if err := harness.PutGPUNode(ctx, e.cp.GPUNodes, specs[1].GPUNode(time.Now())); err != nil {
		t.Fatal(err)
	}
	p := e.waitBound(t, ns, "p")["p"]
	if p.Spec.NodeName != specs[1].Name {
		t.Fatalf("bound to %s, want %s", p.Spec.NodeName, specs[1].Name)
	}
}

// TestLeaseExpiryMakesNodeStale: a node whose agent's Lease expired gets no
// pod although its GPUNode row is fresh and free; the Lease's renewal brings
// the node back and the waiting pod onto it.
func TestLeaseExpiryMakesNodeStale(t *testing.T) {
	e, ns := setup(t)
	specs := e.nodes(t, ns+"-n", 1, 1)
	ctx := context.Background()
	if err := harness.PutLease(ctx, e.cp.Client, specs[0].Name, time.Now().Add(-time.Minute), 40*time.Second); err != nil {
		t.Fatal(err)
	}
	sched := ns + "-sched"
	e.startScheduler(t, sched, "")
	e.createPod(t, ns, "p", sched, harness.GPURequest{Units: 10})
	e.waitEventWith(t, ns, "p", "FailedScheduling", "gpuslice Lease expired")
	e.stayPending(t, ns, "p", 2*time.Second)
	if err := harness.PutLease(ctx, e.cp.Client, specs[0].Name, time.Now(), 40*time.Second); err != nil {
		t.Fatal(err)
	}
	if p := e.waitBound(t, ns, "p")["p"]; p.Spec.NodeName != specs[0].Name {
		t.Fatalf("bound to %s, want %s", p.Spec.NodeName, specs[0].Name)
	}
}

// TestRestartRebuildsBooks: a restarted scheduler rebuilds its books from
// pods' assignments; deleting a pod frees its share.
func TestRestartRebuildsBooks(t *testing.T) {
	e, ns := setup(t)
	e.nodes(t, ns+"-n", 1, 1)
	sched := ns + "-sched"
	s1 := e.startScheduler(t, sched, staticRows)
	e.createPod(t, ns, "a", sched, harness.GPURequest{Units: 60})
	e.waitBound(t, ns, "a")
	s1.Stop()
	e.startScheduler(t, sched, staticRows)
	e.createPod(t, ns, "b", sched, harness.GPURequest{Units: 60})
	e.createPod(t, ns, "c", sched, harness.GPURequest{Units: 40})
	e.waitBound(t, ns, "c")
	e.stayPending(t, ns, "b", 3*time.Second)
	e.checkBooks(t, ns, ns+"-n")
	e.deletePod(t, ns, "a")
	e.waitBound(t, ns, "b")
	e.checkBooks(t, ns, ns+"-n")
}
