//go:build nodee2e

package nodee2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/gpunoderow"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// holdFinalizer keeps a deleted pod's API object after the kubelet is done
// with it, so that what the node frees is seen while the object is there.
const holdFinalizer = "e2e.gpuslice.io/hold"

// preemptedFill is the GPU memory the victim pod holds.
const preemptedFill = 512 << 20

// testPreempted: a pod deleted as kube-scheduler's preemption deletes its
// victims (a whole GPU's units, 512 MiB of GPU memory held, busy kernels)
// frees the node as soon as its containers have stopped, without waiting
// for its API object to go (a finalizer holds it): the first time-slice
// daemon status refreshed after the stop shows its group with no process
// (no GPU time: neither waiting nor holding the GPU) and no memory, and the
// first GPUNode row published after it counts the GPU's units and memory
// free. Quantities read at those points, not timings.
func testPreempted(t *testing.T, ctx context.Context, n *node) {
	cmd := fmt.Sprintf("/gs/gs-memfill --max %d --hold-ms 3600000 >/dev/null & exec %s", preemptedFill, strings.Join(busyTenant(), " "))
	p := sharePod("victim", api.DefaultUnitsPerGPU, podMemory, "", "/bin/sh", "-c", cmd)
	p.Finalizers = []string{holdFinalizer}
	p = n.createPod(ctx, p)
	defer n.unhold(ctx, p.Name)
	p = n.waitPod(bounded(ctx), p.Name, "running", running)
	gpu, group := opGPU(p), groupOf(p)
	var held nodestatus.GroupGPUStatus
	var last string
	err := waitFor(bounded(ctx), func() bool {
		g, ok, raw := n.daemonGroup(gpu.UUID, group)
		held, last = g, raw
		return ok && g.Members >= 1 && g.MemoryUsed >= preemptedFill && g.Grants > 0
	})
	if err != nil {
		t.Fatalf("the victim's group %s never held its memory and GPU time (a process, %d bytes, grants): %v\nstatus: %s", group, preemptedFill, err, last)
	}
	full := n.waitRow(bounded(ctx), "with the victim's GPU full", time.Time{}, func(g *v1alpha2.GPUNode) bool {
		u, m, total, ok := gpuFree(g, gpu.Index)
		return ok && u == 0 && m <= total-podMemory
	})
	_, _, total, _ := gpuFree(full, gpu.Index)
	// Preempted: deleted with its own grace period, as the scheduler's
	// preemption deletes its victims.
	if err := n.cp.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stoppedPod := n.waitPod(bounded(ctx), p.Name, "with its containers stopped", gpunoderow.Stopped)
	stopped := time.Now()
	if !n.statusAfter(bounded(ctx), stopped, 2) {
		t.Fatalf("the daemon wrote no status twice after the victim's containers stopped")
	}
	g, ok, raw := n.daemonGroup(gpu.UUID, group)
	if ok && (g.Members != 0 || g.MemoryUsed != 0 || g.Waiting || g.Holding) {
		t.Errorf("once the victim's containers stopped, its group %s still has %d processes, %d bytes of GPU memory, waiting %v, holding %v (before: %d processes, %d bytes)\nstatus: %s",
			group, g.Members, g.MemoryUsed, g.Waiting, g.Holding, held.Members, held.MemoryUsed, raw)
	}
	row := n.rowAfter(bounded(ctx), stopped, 2)
	if u, m, _, _ := gpuFree(row, gpu.Index); u != api.DefaultUnitsPerGPU || m != total {
		t.Errorf("the first GPUNode row published after the victim's containers stopped has GPU %d with %d units and %d bytes free, want all %d and %d",
			gpu.Index, u, m, api.DefaultUnitsPerGPU, total)
	}
	cur, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil || cur.DeletionTimestamp == nil {
		t.Fatalf("the victim's API object went before the node was checked (%v): nothing shows the node freed it before the kubelet removed it", err)
	}
	t.Logf("e2e preempted: containers stopped (phase %s); the next daemon status: group with %d processes, %d bytes (before %d, %d); the next row: GPU %d with all %d units free; the pod object still there",
		stoppedPod.Status.Phase, g.Members, g.MemoryUsed, held.Members, held.MemoryUsed, gpu.Index, api.DefaultUnitsPerGPU)
}

// daemonGroup reads the time-slice daemon's status of group on GPU uuid
// (ok false: not listed) and the raw status for messages.
func (n *node) daemonGroup(uuid, group string) (nodestatus.GroupGPUStatus, bool, string) {
	st, err := nodestatus.Read(n.runDir())
	if err != nil {
		return nodestatus.GroupGPUStatus{}, false, err.Error()
	}
	b, _ := json.Marshal(st.GPUs)
	for _, g := range st.GPUs {
		if !strings.EqualFold(g.UUID, uuid) {
			continue
		}
		for _, e := range g.Groups {
			if e.Group == group {
				return e, true, string(b)
			}
		}
	}
	return nodestatus.GroupGPUStatus{}, false, string(b)
}

// statusAfter waits until the daemon has written its status count times
// after since: the last of them was refreshed entirely after since.
func (n *node) statusAfter(ctx context.Context, since time.Time, count int) bool {
	var seen []time.Time
	err := harness.WaitFor(ctx, 10*time.Millisecond, func() (bool, error) {
		st, err := nodestatus.Read(n.runDir())
		if err != nil || !st.Time.After(since) {
			return false, nil
		}
		if len(seen) == 0 || st.Time.After(seen[len(seen)-1]) {
			seen = append(seen, st.Time)
		}
		return len(seen) >= count, nil
	})
	return err == nil
}

// rowAfter returns the GPUNode row once the agent has renewed its Lease
// count times after since: it renews it after each publication, so the row
// then read was measured after since.
func (n *node) rowAfter(ctx context.Context, since time.Time, count int) *v1alpha2.GPUNode {
	var seen []time.Time
	var row *v1alpha2.GPUNode
	err := harness.WaitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		le, err := n.cp.Client.CoordinationV1().Leases(api.LeaseNamespace).Get(ctx, api.LeaseName(nodeName), metav1.GetOptions{})
		if err != nil || le.Spec.RenewTime == nil || !le.Spec.RenewTime.After(since) {
			return false, nil
		}
		if r := le.Spec.RenewTime.Time; len(seen) == 0 || r.After(seen[len(seen)-1]) {
			seen = append(seen, r)
		}
		if len(seen) < count {
			return false, nil
		}
		row, err = n.cp.GPUNodes.GpusliceV1alpha2().GPUNodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		n.t.Fatalf("the agent published no row %d times after %v: %v\nagent log:\n%s", count, since, err, n.agentTail())
	}
	return row
}

// gpuFree reads GPU idx's free units and memory, and its memory, in a row.
func gpuFree(g *v1alpha2.GPUNode, idx int32) (units, memory, total int64, ok bool) {
	for _, gpu := range g.Status.GPUs {
		if gpu.Index == idx {
			return gpu.UnitsFree, gpu.MemoryFree.Value(), gpu.Memory.Value(), true
		}
	}
	return 0, 0, 0, false
}

// unhold deletes a pod (if the test did not) and takes its finalizer off,
// and waits until it is gone.
func (n *node) unhold(ctx context.Context, name string) {
	pods := n.cp.Client.CoreV1().Pods(ns)
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		n.t.Errorf("delete pod %s: %v", name, err)
	}
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		n.t.Errorf("unhold pod %s: %v", name, err)
		return
	}
	err := harness.WaitFor(bounded(ctx), 50*time.Millisecond, func() (bool, error) {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		n.t.Errorf("pod %s never gone: %v", name, err)
	}
}
