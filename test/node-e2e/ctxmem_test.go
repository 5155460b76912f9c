//go:build nodee2e

package nodee2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

const (
	// simContextMemory is what a context takes on the simulated GPU by
	// default (GPUSLICE_SIM_CONTEXT_MEMORY unset), as on a real card.
	simContextMemory = 300 << 20
	ctxHolderLimit   = 2 << 30
	ctxHolderFill    = 512 << 20
	ctxSmallLimit    = 512 << 20
	ctxSmallFill     = 256 << 20 // fits the limit alone, not beside the context
)

// envContextMemory is the simulator's setting the harness sets to 0.
const envContextMemory = "GPUSLICE_SIM_CONTEXT_MEMORY"

// testContextMemory: with the simulated GPU's realistic default (each
// context takes 300 MiB, as a real card's), the memory a context takes is
// the pod's: a pod holding 512 MiB beside two CUDA processes has 2 x 300 MiB +
// 512 MiB in its group's memory.current and in `gpuslice status`; a pod of
// 512 MiB asking for 256 MiB beside its context is refused with the one-line
// reason naming the 300 MiB it uses (its memory.current: its context), while the first pod, on the same GPU,
// keeps its limit and its memory. Exact figures: with the context not
// counted they read 512 MiB and the 256 MiB allocation succeeds. The agent is
// restarted without the harness's GPUSLICE_SIM_CONTEXT_MEMORY=0 (it passes
// GPUSLICE_SIM_* on to containers) and is left so: this runs last.
func testContextMemory(t *testing.T, ctx context.Context, n *node) {
	n.restartAgentUnset(ctx, envContextMemory)
	holderCmd := fmt.Sprintf("/gs/gs-memfill --chunk %d --max %d --hold-ms 3600000 >/dev/null & "+
		"exec /gs/gs-tenant --mode requests --kernel-us 500 --n 1 --gap-ms 200 --seconds 3600", ctxHolderFill, ctxHolderFill)
	holder := n.createPod(ctx, sharePod("ctx-holder", 50, ctxHolderLimit, "", "/bin/sh", "-c", holderCmd))
	holder = n.waitPod(bounded(ctx), holder.Name, "running", running)
	want := uint64(2*simContextMemory + ctxHolderFill)
	n.waitGroupMemory(bounded(ctx), holder, want, ctxHolderLimit, true)
	gpu := opGPU(holder)

	// The small pod goes beside the holder: the other GPUs are lost meanwhile.
	lost := n.loseOthers(ctx, n.minors(assignment(holder), "main"))
	small := n.createPod(ctx, sharePod("ctx-small", 25, ctxSmallLimit, "", "/bin/sh", "-c",
		fmt.Sprintf("/gs/gs-memfill --chunk %d --max %d --hold-ms 3600000", ctxSmallFill, ctxSmallFill)))
	small = n.waitPod(bounded(ctx), small.Name, "running", running)
	n.findAgain(ctx, lost)
	if g := opGPU(small); g.UUID != gpu.UUID {
		t.Fatalf("ctx-small on GPU %s, ctx-holder on %s: want one GPU (the only healthy one)", g.UUID, gpu.UUID)
	}
	report, reason := n.memfillReport(bounded(ctx), small)
	if report.Allocated != 0 || report.StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" || report.Total != ctxSmallLimit ||
		report.Free != ctxSmallLimit-simContextMemory {
		t.Errorf("ctx-small (limit 512 MiB, a 300 MiB context, 256 MiB asked): got %+v, want total %d, free %d, allocated 0, stopped by CUDA_ERROR_OUT_OF_MEMORY",
			report, ctxSmallLimit, ctxSmallLimit-simContextMemory)
	}
	wantReason := fmt.Sprintf("gpuslice: allocation of 256.0 MiB refused on %s: group %q uses 300.0 MiB of its 512.0 MiB limit", gpu.UUID, groupOf(small))
	if !strings.EqualFold(reason, wantReason) {
		t.Errorf("ctx-small's refusal:\n got  %q\n want %q", reason, wantReason)
	}
	n.waitGroupMemory(bounded(ctx), small, simContextMemory, ctxSmallLimit, false)
	// The holder beside it: its limit and memory as they were.
	n.waitGroupMemory(bounded(ctx), holder, want, ctxHolderLimit, true)
	if p := n.waitPod(bounded(ctx), holder.Name, "running", running); p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("ctx-holder restarted %d times", p.Status.ContainerStatuses[0].RestartCount)
	}
	t.Logf("e2e context memory: ctx-holder's group holds %d B (2 contexts of %d B + %d B), ctx-small refused: %s", want, simContextMemory, ctxHolderFill, reason)
	n.deletePods(bounded(ctx), holder.Name, small.Name)
}

// restartAgentUnset restarts the agent with env unset in its environment
// (restored for the test's own process once it started) and waits until it
// is ready and has published the node's row again.
func (n *node) restartAgentUnset(ctx context.Context, env string) {
	old, had := os.LookupEnv(env)
	n.killAgent()
	if err := os.Unsetenv(env); err != nil {
		n.t.Fatal(err)
	}
	restart := time.Now()
	n.startAgent()
	if had {
		if err := os.Setenv(env, old); err != nil {
			n.t.Fatal(err)
		}
	}
	n.opWaitReady(ctx)
	n.waitRow(bounded(ctx), "published after the restart", restart, func(g *v1alpha2.GPUNode) bool { return healthy(g) == numGPUs })
}

// waitGroupMemory waits until the pod's group holds want bytes in its
// memory.current (the daemon's read-back) and, if listed (a group with a
// process that ran kernels: `gpuslice status` lists groups by their GPU
// time), in `gpuslice status`, with its limit (memory.max) limit bytes.
func (n *node) waitGroupMemory(ctx context.Context, p *corev1.Pod, want, limit uint64, listed bool) {
	name, gpu := groupOf(p), opGPU(p).UUID
	var current, limitFile, status string
	err := waitFor(ctx, func() bool {
		current, limitFile = n.groupFile(name, group.FileMemoryCurrent), n.groupFile(name, group.FileMemoryMax)
		status = "not listed"
		for _, g := range n.opStatus().GPUs {
			if !strings.EqualFold(g.UUID, gpu) {
				continue
			}
			for _, e := range g.Groups {
				if e.Name == name {
					status = fmt.Sprintf("memoryUsedBytes %d, memoryMaxBytes %d", e.MemoryUsed, e.MemoryMax)
				}
			}
		}
		return current == strconv.FormatUint(want, 10) && limitOf(limitFile) == limit &&
			(!listed || status == fmt.Sprintf("memoryUsedBytes %d, memoryMaxBytes %d", want, limit))
	})
	if err != nil {
		n.t.Fatalf("pod %s's group %s: memory.current %s, memory.max %s, gpuslice status %s; want %d bytes held of a %d-byte limit (contexts of %d bytes counted): %v",
			p.Name, name, current, limitFile, status, want, limit, simContextMemory, err)
	}
}

// limitOf parses a memory.max file's content (0 if it cannot be parsed).
func limitOf(v string) uint64 {
	var s group.Settings
	if s.Apply(group.FileMemoryMax, v) != nil {
		return 0
	}
	return s.MemoryMax
}

// groupFile reads one file of a group's directory on the node, trimmed.
func (n *node) groupFile(name, file string) string {
	b, err := os.ReadFile(filepath.Join(n.runDir(), "groups", name, file))
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(b))
}

// memfillResult is gs-memfill's report line.
type memfillResult struct {
	Total     uint64 `json:"total"`
	Free      uint64 `json:"free"`
	Allocated uint64 `json:"allocated"`
	StoppedBy string `json:"stopped_by"`
}

// memfillReport waits for gs-memfill's report in the pod's log and returns
// it with libgpuslice's line before it ("gpuslice: ..."; "" for none).
func (n *node) memfillReport(ctx context.Context, p *corev1.Pod) (memfillResult, string) {
	var r memfillResult
	var reason string
	scan := func() bool { // the whole log: stdout's report and stderr's line come in either order
		found := false
		reason = ""
		for _, e := range n.logEntries(p) {
			if strings.HasPrefix(e.msg, "gpuslice: ") {
				reason = e.msg
			}
			if strings.HasPrefix(e.msg, "{") && json.Unmarshal([]byte(e.msg), &r) == nil {
				found = true
			}
		}
		return found
	}
	if err := waitFor(ctx, scan); err != nil {
		n.t.Fatalf("pod %s never reported: %v\nlog:\n%s", p.Name, err, n.podLog(p))
	}
	// A refusal's line (stderr) may reach the log after the report (stdout);
	// none at all is the caller's failure to report.
	_ = waitFor(ctx, func() bool { return scan() && reason != "" })
	return r, reason
}
