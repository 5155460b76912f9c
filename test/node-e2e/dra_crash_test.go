//go:build nodee2e

package nodee2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/dra"
	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// testDRACrashSteps: the agent, built with the gpuslice_faultinject tag
// (GPUSLICE_NODE_FAULTINJECT, make e2e-dra), kills itself (SIGKILL) at each
// of the driver's 8 steps (dra.Steps) on the real kubelet: at a Prepare step
// while a new pod's claim (10 units, 256 MiB on GPU 1) is prepared, at an
// Unprepare step while its pod is deleted. The release agent is started
// again; the kubelet retries: the pod runs (Prepare) or the claim goes
// (Unprepare), and the node holds exactly one group, CDI spec and prepared
// checkpoint entry per claim of a running pod, nothing else.
func testDRACrashSteps(t *testing.T, ctx context.Context, n *node) {
	faulty := need(t, "GPUSLICE_NODE_FAULTINJECT")
	n.claimTemplate(ctx, "crash", 10, 256*mib, shapesGPU, "")
	running0 := []string{"s25", "s75"}
	for i, step := range dra.Steps() {
		name := fmt.Sprintf("crash-%d", i)
		prepare := i < slices.Index(dra.Steps(), dra.StepUnprepareStarted)
		if !prepare {
			n.waitPod(bounded(ctx), n.createPod(ctx, draPod(name, "crash", "/bin/busybox", "sleep", "3600")).Name, "running", running)
		}
		start := time.Now()
		n.restartAgent(ctx, faulty, dra.CrashAtEnv+"="+string(step))
		var c string
		if prepare {
			p := n.createPod(ctx, draPod(name, "crash", "/bin/busybox", "sleep", "3600"))
			c = string(n.claimOf(ctx, p).UID)
		} else {
			p, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c = string(n.claimOf(ctx, p).UID)
			n.deletePods(ctx, name)
		}
		select {
		case <-n.agentDone:
		case <-time.After(2 * time.Minute):
			t.Fatalf("step %s: the agent did not reach the step\nagent log:\n%s", step, n.agentTail())
		}
		n.agent = nil
		n.restartAgent(ctx, "", "")
		if prepare {
			n.waitPod(bounded(ctx), name, "running after the agent died at "+string(step), running)
			n.checkOnce(ctx, append(slices.Clone(running0), name))
			n.checkPrepared(step)
			n.deletePods(ctx, name)
		}
		n.waitUnpreparedUID(bounded(ctx), c)
		n.checkOnce(ctx, running0)
		t.Logf("e2e dra crash: agent killed at %s, restarted; claim prepared once and then gone (%v)", step, time.Since(start).Round(time.Millisecond))
	}
}

// restartAgent stops the agent (if it runs) and starts path ("" the
// release build) with env added ("" none), waiting until its DRA plugin serves.
func (n *node) restartAgent(ctx context.Context, path, env string) {
	n.killAgent()
	before := n.servings()
	n.agentPath, n.agentEnv = path, nil
	if env != "" {
		n.agentEnv = []string{env}
	}
	n.startAgent()
	n.agentPath, n.agentEnv = "", nil
	n.waitAgentServing(ctx, before+1)
}

// servings counts the agent log's "DRA kubelet plugin serving" lines.
func (n *node) servings() int {
	b, _ := os.ReadFile(n.agentLog)
	return strings.Count(string(b), `"DRA kubelet plugin serving"`)
}

// checkPrepared: every checkpoint entry is PrepareCompleted.
func (n *node) checkPrepared(step dra.Step) {
	cp, err := checkpoint.Load(draCheckpoint)
	if err != nil {
		n.t.Fatal(err)
	}
	for uid, c := range cp.Claims {
		if c.State != checkpoint.PrepareCompleted {
			n.t.Errorf("after the crash at %s, claim %s is %s", step, uid, c.State)
		}
	}
}

// waitUnpreparedUID waits until the node holds nothing of claim uid.
func (n *node) waitUnpreparedUID(ctx context.Context, uid string) {
	var group, spec, saved bool
	err := harness.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		group, spec, saved = n.claimOnNode(uid)
		return !group && !spec && !saved, nil
	})
	if err != nil {
		n.t.Fatalf("claim %s still on the node (group %v, CDI spec %v, checkpoint entry %v): %v\nagent log:\n%s", uid, group, spec, saved, err, n.agentTail())
	}
}
