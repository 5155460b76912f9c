//go:build nodee2e

package nodee2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// waitRow waits until the node's GPUNode row, confirmed by a publication of
// the agent after since, satisfies cond, and returns it. The agent writes the
// row only when it changes and renews its Lease after every publication, so
// a Lease renewed after since (read before the row) vouches for the row.
func (n *node) waitRow(ctx context.Context, what string, since time.Time, cond func(*v1alpha2.GPUNode) bool) *v1alpha2.GPUNode {
	var last *v1alpha2.GPUNode
	err := harness.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		le, err := n.cp.Client.CoordinationV1().Leases(api.LeaseNamespace).Get(ctx, api.LeaseName(nodeName), metav1.GetOptions{})
		if err != nil || le.Spec.RenewTime == nil {
			return false, nil // not published yet
		}
		g, err := n.cp.GPUNodes.GpusliceV1alpha2().GPUNodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil // not published yet
		}
		last = g
		return le.Spec.RenewTime.After(since) && cond(g), nil
	})
	if err != nil {
		n.t.Fatalf("GPUNode row never %s: %v\nlast: %+v\nagent log:\n%s", what, err, last, n.agentTail())
	}
	return last
}

// unscheduled returns the unscheduled process count of GPU idx in a row.
func unscheduled(g *v1alpha2.GPUNode, idx int32) int32 {
	for _, gpu := range g.Status.GPUs {
		if gpu.Index == idx {
			return gpu.UnscheduledProcesses
		}
	}
	return -1
}

// foreign starts a GPU process on the host that no pod owns (gs-memfill
// holding memory on GPU idx); the returned function kills it.
func (n *node) foreign(idx int32) func() {
	cmd := exec.Command(filepath.Join(n.bin, "gs-memfill"), "--max", "256M", "--hold-ms", "60000")
	cmd.Env = append(cmd.Environ(), "LD_LIBRARY_PATH="+filepath.Join(n.bin, "sim"), "CUDA_VISIBLE_DEVICES="+strconv.Itoa(int(idx)))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait() // killed on purpose
	}
}
