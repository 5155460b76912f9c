//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// TestResizeRacesScheduling: the resize controller runs inside
// gpuslice-scheduler on the plugin's books. A running pod asking for one more
// GPU and a new pod created at the same moment, on a node with one free GPU,
// never both get it: one wins, the other is left pending or short (with a
// GPUResizePartial Event), and the API server's books are never
// over-committed. Repeated so both orders occur.
func TestResizeRacesScheduling(t *testing.T) {
	e, ns := setup(t)
	e.nodes(t, ns+"-n", 1, 2)
	sched := ns + "-sched"
	e.startScheduler(t, sched, `{heartbeatTimeout: 1h}`)
	const rounds = 8
	won := map[string]int{}
	for i := range rounds {
		won[e.resizeRound(t, ns, sched, i)]++
	}
	t.Logf("resize vs scheduling over %d rounds: the resize won %d, the new pod won %d", rounds, won["resize"], won["new pod"])
}

// resizeRound runs one race and says who got the free GPU.
func (e *env) resizeRound(t *testing.T, ns, sched string, i int) string {
	t.Helper()
	ctx := context.Background()
	old, fresh := fmt.Sprintf("old-%d", i), fmt.Sprintf("new-%d", i)
	e.createPod(t, ns, old, sched, harness.GPURequest{GPUs: 1}, func(p *corev1.Pod) {
		p.Annotations = map[string]string{api.AnnotationGPUs: "1"}
	})
	e.waitBound(t, ns, old)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.AnnotationGPUs: "2"}}})
		_, err := e.cp.Client.CoreV1().Pods(ns).Patch(ctx, old, types.MergePatchType, patch, metav1.PatchOptions{})
		errs <- err
	})
	wg.Go(func() {
		p := harness.Pod(ns, fresh, sched, harness.GPURequest{GPUs: 1})
		p.Spec.NodeSelector = map[string]string{groupLabel: ns}
		_, err := e.cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		errs <- err
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	winner := e.waitRaceSettled(t, ns, old, fresh)
	// Nothing changes afterwards: the loser stays short or pending.
	time.Sleep(1500 * time.Millisecond)
	if again := e.raceState(t, ns, old, fresh); again != winner {
		t.Fatalf("round %d: %s won, then the state became %q", i, winner, again)
	}
	e.checkBooks(t, ns, ns+"-n")
	e.deletePod(t, ns, fresh)
	e.deletePod(t, ns, old)
	e.waitGone(t, ns, fresh, old)
	return winner
}

// waitRaceSettled waits until one side won: the resized pod holds two GPUs,
// or the new pod is bound and the resized one got a GPUResizePartial Event.
func (e *env) waitRaceSettled(t *testing.T, ns, old, fresh string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var state string
	err := harness.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		state = e.raceState(t, ns, old, fresh)
		if state != "new pod" {
			return state == "resize", nil
		}
		evs, err := e.cp.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		return slices.ContainsFunc(evs.Items, func(ev eventsv1.Event) bool {
			return ev.Regarding.Name == old && ev.Reason == api.ReasonGPUResizePartial
		}), nil
	})
	if err != nil {
		t.Fatalf("race of %s and %s never settled (last state %q): %v", old, fresh, state, err)
	}
	return state
}

// raceState reads both pods: "resize" (old holds 2 GPUs, new pending), "new
// pod" (new bound, old holds 1), "" while undecided; both winning fails.
func (e *env) raceState(t *testing.T, ns, old, fresh string) string {
	t.Helper()
	ctx := context.Background()
	o, err := e.cp.Client.CoreV1().Pods(ns).Get(ctx, old, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := e.cp.Client.CoreV1().Pods(ns).Get(ctx, fresh, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldGPUs := assignment(t, o).Containers[0].GPUs
	switch {
	case len(oldGPUs) == 2 && n.Spec.NodeName != "":
		t.Fatalf("both got the free GPU: %s holds %+v, %s holds %+v", old, oldGPUs, fresh, assignment(t, n).Containers[0].GPUs)
	case len(oldGPUs) == 2:
		return "resize"
	case n.Spec.NodeName != "":
		if idx := assignment(t, n).Containers[0].GPUs[0].Index; idx == oldGPUs[0].Index {
			t.Fatalf("%s and %s share GPU %d", old, fresh, idx)
		}
		return "new pod"
	}
	return ""
}

// waitGone waits until the pods are deleted.
func (e *env) waitGone(t *testing.T, ns string, names ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := harness.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		for _, n := range names {
			if _, err := e.cp.Client.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{}); !isNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("pods %v not deleted: %v", names, err)
	}
}
