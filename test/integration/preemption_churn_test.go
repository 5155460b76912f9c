//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// churnPod is a pod the churn test created: its priority and request.
type churnPod struct {
	prio int32
	req  harness.GPURequest
}

// churnRequest draws a pod's request: for the highest priority small
// shares only (their sum stays well inside the cluster, so every one of
// them fits), for the others also whole GPUs and larger shares.
func churnRequest(r *rand.Rand, high bool) harness.GPURequest {
	if high {
		return harness.GPURequest{Units: int64(10 * (1 + r.IntN(3))), Memory: int64(1+r.IntN(2)) * harness.GiB}
	}
	if r.IntN(10) == 0 {
		return harness.GPURequest{GPUs: 1}
	}
	return harness.GPURequest{Units: int64(10 * (1 + r.IntN(6))), Memory: int64(1+r.IntN(6)) * harness.GiB}
}

// TestPreemptionChurn: 500 pods of priorities 0, 100 and 1000 and mixed
// sizes come and go at random on 50 KWOK nodes of 2 GPUs. After every step
// the API server's state has no over-committed GPU; at the end every live
// pod of the highest priority is bound, and every pod the scheduler evicted
// (a Preempted event) was of lower priority than the pod it made room for,
// and no pod vanished without such an event or the test deleting it.
func TestPreemptionChurn(t *testing.T) {
	e, ns := setup(t)
	kwok, err := e.cp.StartKwok(e.bins)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kwok.Stop)
	prefix := ns + "-n"
	for i := 0; i < 50; i++ {
		s := harness.NodeSpec{Name: fmt.Sprintf("%s-%d", prefix, i), GPUs: 2, GPUMemory: 16 * harness.GiB, Kwok: true,
			Labels: map[string]string{groupLabel: ns}}
		if err := e.cp.CreateNode(context.Background(), s, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	sched := ns + "-sched"
	e.startScheduler(t, sched, staticRows)
	classes := map[int32]func(*corev1.Pod){100: e.priorityClass(t, ns, 100), 1000: e.priorityClass(t, ns, 1000)}
	ctx := context.Background()
	pods := e.cp.Client.CoreV1().Pods(ns)
	r := rand.New(rand.NewPCG(25, 1))
	created := map[string]churnPod{}
	byUID := map[string]string{} // pod UID -> name
	deleted := map[string]bool{}
	var live []string
	zero := int64(0)
	const total, perStep = 500, 10
	for i := 0; i < total; i++ {
		if len(live) > 0 && r.IntN(10) < 3 { // a random deletion
			j := r.IntN(len(live))
			name := live[j]
			live = append(live[:j], live[j+1:]...)
			if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !isNotFound(err) {
				t.Fatal(err)
			}
			deleted[name] = true
		}
		prio := []int32{0, 0, 0, 100, 100, 1000}[r.IntN(6)]
		name := fmt.Sprintf("c-%d-%03d", prio, i)
		cp := churnPod{prio: prio, req: churnRequest(r, prio == 1000)}
		var mut []func(*corev1.Pod)
		if prio > 0 {
			mut = append(mut, classes[prio])
		}
		pod := harness.Pod(ns, name, sched, cp.req)
		pod.Spec.NodeSelector = map[string]string{groupLabel: ns}
		for _, m := range mut {
			m(pod)
		}
		got, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created[name] = cp
		byUID[string(got.UID)] = name
		live = append(live, name)
		if i%perStep == perStep-1 {
			time.Sleep(200 * time.Millisecond)
			e.checkBooks(t, ns, prefix)
		}
	}
	b := e.waitSettled(t, ns, prefix)
	t.Logf("settled: %d bound, %d pending; %d/%d GPUs used", b.Bound, b.Pending, b.UsedGPUs, b.GPUs)
	var high []string
	for _, n := range live {
		if created[n].prio == 1000 {
			if _, err := pods.Get(ctx, n, metav1.GetOptions{}); err == nil {
				high = append(high, n)
			}
		}
	}
	e.waitBound(t, ns, high...)
	e.checkEvictions(t, ns, created, byUID, deleted)
}

// checkEvictions checks every Preempted event against the pods' priorities
// and that every pod gone was deleted by the test or preempted.
func (e *env) checkEvictions(t *testing.T, ns string, created map[string]churnPod, byUID map[string]string, deleted map[string]bool) {
	t.Helper()
	ctx := context.Background()
	evs, err := e.cp.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	preempted := map[string]bool{}
	for _, ev := range evs.Items {
		if ev.Reason != "Preempted" {
			continue
		}
		// "Preempted by pod <uid> on node <node>"
		victim, by := ev.Regarding.Name, ""
		if f := strings.Fields(ev.Note); len(f) >= 4 && f[0] == "Preempted" && f[2] == "pod" {
			by = byUID[f[3]]
		}
		if by == "" {
			t.Fatalf("Preempted event on %s names no pod of the test: %q", victim, ev.Note)
		}
		if v, p := created[victim], created[by]; v.prio >= p.prio {
			t.Errorf("%s (priority %d) was evicted for %s (priority %d)", victim, v.prio, by, p.prio)
		}
		preempted[victim] = true
	}
	list, err := e.cp.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, p := range list.Items {
		present[p.Name] = true
	}
	var vanished []string
	for n := range created {
		if !present[n] && !deleted[n] && !preempted[n] {
			vanished = append(vanished, n)
		}
	}
	if len(vanished) > 0 {
		t.Fatalf("pods gone without a deletion or a Preempted event: %s", strings.Join(vanished, ", "))
	}
	t.Logf("%d evictions, all of lower-priority pods; %d deleted by the test", len(preempted), len(deleted))
	if len(preempted) == 0 {
		t.Fatal("no pod was preempted: the churn did not fill the cluster")
	}
}
