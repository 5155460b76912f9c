//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

const resizeStarted = "resize controller starting: this replica leads"

// TestLeaderKilledMidResize: two gpuslice-scheduler replicas with leader
// election; only the leader runs the resize controller. The leader is killed
// (SIGKILL) the moment a running pod asks for a second GPU while a new pod
// asks for the last free one; the other replica takes the lease, starts its
// resize controller, and exactly one of the two gets the GPU (never both: no
// double grant); the API server's books are never over-committed.
func TestLeaderKilledMidResize(t *testing.T) {
	e, ns := setup(t)
	e.nodes(t, ns+"-n", 1, 2)
	sched := ns + "-sched"
	opts := harness.SchedulerOptions{SchedulerName: sched, GPUSlice: true, Args: `{heartbeatTimeout: 1h}`,
		Lease: sched, LeaseNamespace: ns}
	a := e.startReplica(t, sched+"-a", opts)
	holder := e.waitLeaseHolder(t, ns, sched, "")
	b := e.startReplica(t, sched+"-b", opts)
	e.createPod(t, ns, "old", sched, harness.GPURequest{GPUs: 1}, func(p *corev1.Pod) {
		p.Annotations = map[string]string{api.AnnotationGPUs: "1"}
	})
	e.waitBound(t, ns, "old")
	if !logHas(t, a, resizeStarted) || logHas(t, b, resizeStarted) {
		t.Fatalf("the resize controller must run in the leader (%s) only:\n--- a\n%s\n--- b\n%s", holder, a.Tail(), b.Tail())
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.AnnotationGPUs: "2"}}})
		_, err := e.cp.Client.CoreV1().Pods(ns).Patch(ctx, "old", types.MergePatchType, patch, metav1.PatchOptions{})
		errs <- err
	})
	wg.Go(func() {
		p := harness.Pod(ns, "new", sched, harness.GPURequest{GPUs: 1})
		p.Spec.NodeSelector = map[string]string{groupLabel: ns}
		_, err := e.cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		errs <- err
	})
	a.Kill()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	killed := time.Now()
	next := e.waitLeaseHolder(t, ns, sched, holder)
	winner := e.waitRaceSettled(t, ns, "old", "new")
	t.Logf("leader %s killed mid-resize; %s leads %.1fs later; %s got the free GPU", holder, next, time.Since(killed).Seconds(), winner)
	if !logHas(t, b, resizeStarted) {
		t.Fatalf("the new leader's resize controller did not start:\n%s", b.Tail())
	}
	time.Sleep(1500 * time.Millisecond)
	if again := e.raceState(t, ns, "old", "new"); again != winner {
		t.Fatalf("%s won, then the state became %q", winner, again)
	}
	e.checkBooks(t, ns, ns+"-n")
}

// waitLeaseHolder waits until the Lease names a holder other than not.
func (e *env) waitLeaseHolder(t *testing.T, ns, name, not string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var holder string
	err := harness.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		l, err := e.cp.Client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder = *l.Spec.HolderIdentity
		return holder != "" && holder != not, nil
	})
	if err != nil {
		t.Fatalf("lease %s/%s: no holder other than %q: %v", ns, name, not, err)
	}
	return holder
}

// logHas waits briefly for s in p's log (a replica logs as it starts).
func logHas(t *testing.T, p *harness.Process, s string) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(p.Log)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), s) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}
