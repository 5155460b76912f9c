//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// TestShareChangesUnderChurn: running pods ask for new units
// (gpuslice.io/units) while pods come and go on a node of one GPU; the
// resize controller in gpuslice-scheduler books each change first. The API
// server's books are never over-committed; a change that fits is written
// (GPUShareResized) and one that does not is refused whole (GPUShareRefused,
// the assignment unchanged).
func TestShareChangesUnderChurn(t *testing.T) {
	e, ns := setup(t)
	e.nodes(t, ns+"-n", 1, 1)
	sched := ns + "-sched"
	e.startScheduler(t, sched, `{heartbeatTimeout: 1h}`)
	ctx := context.Background()
	setUnits := func(name string, u int64) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.AnnotationUnits: strconv.FormatInt(u, 10)}}})
		if _, err := e.cp.Client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !isNotFound(err) {
			t.Fatal(err)
		}
	}
	// Fits / does not fit: a 25-unit pod beside 50 on the GPU.
	e.createPod(t, ns, "a", sched, harness.GPURequest{Units: 25, Memory: 1 << 30})
	e.createPod(t, ns, "b", sched, harness.GPURequest{Units: 50, Memory: 1 << 30})
	e.waitBound(t, ns, "a", "b")
	setUnits("a", 80)
	e.waitEventWith(t, ns, "a", api.ReasonShareRefused, "units asked")
	if p, _ := e.cp.Client.CoreV1().Pods(ns).Get(ctx, "a", metav1.GetOptions{}); assignment(t, p).Containers[0].GPUs[0].Units != 25 {
		t.Fatal("a refused change altered the assignment")
	}
	setUnits("a", 50)
	e.waitEventWith(t, ns, "a", api.ReasonShareResized, "main=50 units")
	e.checkBooks(t, ns, ns+"-n")

	// Churn: a and b stay; 8 more pods of 10..40 units, random share
	// changes, deletions and new pods; the books stay within capacity
	// after every step.
	rng := rand.New(rand.NewPCG(7, 11))
	live := map[string]bool{}
	for range 40 {
		name := fmt.Sprintf("c-%d", rng.IntN(8))
		switch {
		case !live[name]:
			if _, err := e.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
				continue // still terminating
			}
			e.createPod(t, ns, name, sched, harness.GPURequest{Units: 10 + rng.Int64N(31), Memory: 1 << 30})
			live[name] = true
		case rng.IntN(5) == 0:
			e.deletePod(t, ns, name)
			delete(live, name)
		default:
			setUnits(name, 5+rng.Int64N(60))
		}
		time.Sleep(50 * time.Millisecond)
		e.checkBooks(t, ns, ns+"-n")
	}
	time.Sleep(2 * time.Second)
	e.checkBooks(t, ns, ns+"-n")
}
