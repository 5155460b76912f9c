//go:build integration

package integration

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// priorityClass creates a PriorityClass of the given value for the test
// (deleted at its end) and returns what puts a pod in it: the class name and
// the priority the Priority admission plugin would set (the harness's API
// server runs without it).
func (e *env) priorityClass(t *testing.T, ns string, value int32) func(*corev1.Pod) {
	t.Helper()
	name := ns + "-p" + strconv.Itoa(int(value))
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if _, err := e.cp.Client.SchedulingV1().PriorityClasses().Create(context.Background(), pc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cp.Client.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return func(p *corev1.Pod) {
		p.Spec.PriorityClassName = name
		p.Spec.Priority = &value
	}
}

func withLabel(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Labels = map[string]string{k: v} }
}

// fillInOrder creates and binds the pods one at a time, so that binpack
// places them in a known order.
func (e *env) fillInOrder(t *testing.T, ns, sched string, pods []filler) {
	t.Helper()
	for _, f := range pods {
		e.createPod(t, ns, f.name, sched, f.req, f.mut...)
		e.waitBound(t, ns, f.name)
	}
}

type filler struct {
	name string
	req  harness.GPURequest
	mut  []func(*corev1.Pod)
}

// present lists the namespace's pods that are not being deleted.
func (e *env) present(t *testing.T, ns string) []string {
	t.Helper()
	l, err := e.cp.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	sort.Strings(out)
	return out
}

// preemptSetup starts a test of one node with gpus GPUs, its scheduler and
// a PriorityClass of 1000.
func preemptSetup(t *testing.T, gpus int) (e *env, ns, sched string, high func(*corev1.Pod)) {
	t.Helper()
	e, ns = setup(t)
	e.nodes(t, ns+"-n", 1, gpus)
	sched = ns + "-sched"
	e.startScheduler(t, sched, staticRows)
	return e, ns, sched, e.priorityClass(t, ns, 1000)
}

// preemptAndCheck creates the high-priority pod, waits until it is bound
// and checks that exactly the pods in evicted are gone and nothing is
// over-committed.
func (e *env) preemptAndCheck(t *testing.T, ns, sched string, class func(*corev1.Pod), req harness.GPURequest, evicted []string) {
	t.Helper()
	before := e.present(t, ns)
	e.createPod(t, ns, "hi", sched, req, class)
	e.waitBound(t, ns, "hi")
	e.checkLeft(t, ns, before, evicted)
	e.checkBooks(t, ns, ns+"-n")
}

// checkLeft checks that the pods left are before but evicted, plus "hi", and
// returns them.
func (e *env) checkLeft(t *testing.T, ns string, before, evicted []string) []string {
	t.Helper()
	var want []string
	for _, n := range before {
		if !slices.Contains(evicted, n) {
			want = append(want, n)
		}
	}
	want = append(want, "hi")
	sort.Strings(want)
	if got := e.present(t, ns); !slices.Equal(got, want) {
		t.Fatalf("pods left %v, want %v (evicted exactly %v)", got, want, evicted)
	}
	return want
}

// TestPreemptFewestOnOneGPU: a node's two GPUs are full of priority-0
// shares (GPU 0: 60, 20 and 20 units; GPU 1: ten pods of 10); a
// priority-1000 pod of 50 units evicts only the 60-unit pod (one victim,
// on one GPU) and is bound; DefaultPreemption would have evicted from the
// oldest pods down.
func TestPreemptFewestOnOneGPU(t *testing.T) {
	e, ns, sched, high := preemptSetup(t, 2)
	mem := harness.GiB
	fill := []filler{{name: "big", req: harness.GPURequest{Units: 60, Memory: mem}},
		{name: "s1", req: harness.GPURequest{Units: 20, Memory: mem}}, {name: "s2", req: harness.GPURequest{Units: 20, Memory: mem}}}
	for _, n := range names("t", 10) {
		fill = append(fill, filler{name: n, req: harness.GPURequest{Units: 10, Memory: mem}})
	}
	e.fillInOrder(t, ns, sched, fill)
	e.preemptAndCheck(t, ns, sched, high, harness.GPURequest{Units: 50, Memory: mem}, []string{"big"})
}

// TestPreemptFewestMixedSizes: one GPU of 40, 10, 10, 10, 10 and 20 units;
// 50 units asked: two victims, the 40-unit pod among them.
func TestPreemptFewestMixedSizes(t *testing.T) {
	e, ns, sched, high := preemptSetup(t, 1)
	var fill []filler
	for i, u := range []int64{40, 10, 10, 10, 10, 20} {
		fill = append(fill, filler{name: "f-" + strconv.Itoa(i), req: harness.GPURequest{Units: u, Memory: harness.GiB}})
	}
	e.fillInOrder(t, ns, sched, fill)
	before := e.present(t, ns)
	e.createPod(t, ns, "hi", sched, harness.GPURequest{Units: 50, Memory: harness.GiB}, high)
	e.waitBound(t, ns, "hi")
	got := e.present(t, ns)
	var gone []string
	for _, n := range before {
		if !slices.Contains(got, n) {
			gone = append(gone, n)
		}
	}
	if len(gone) != 2 || !slices.Contains(gone, "f-0") {
		t.Fatalf("evicted %v, want two pods including f-0 (40 units)", gone)
	}
	e.checkBooks(t, ns, ns+"-n")
}

// TestPreemptMemoryOnly: memory-only shares of 8, 2, 2 and 4 GiB fill a
// 16 GiB GPU; a pod asking for 8 GiB evicts the 8 GiB one.
func TestPreemptMemoryOnly(t *testing.T) {
	e, ns, sched, high := preemptSetup(t, 1)
	var fill []filler
	for i, g := range []int64{2, 8, 2, 4} {
		fill = append(fill, filler{name: "m-" + strconv.Itoa(i), req: harness.GPURequest{Memory: g * harness.GiB}})
	}
	e.fillInOrder(t, ns, sched, fill)
	e.preemptAndCheck(t, ns, sched, high, harness.GPURequest{Memory: 8 * harness.GiB}, []string{"m-1"})
}

// TestPreemptWholeGPU: GPU 0 is held whole by one pod, GPU 1 shared by
// three; a priority-1000 whole-GPU pod evicts the one whole holder.
func TestPreemptWholeGPU(t *testing.T) {
	e, ns, sched, high := preemptSetup(t, 2)
	fill := []filler{{name: "w", req: harness.GPURequest{GPUs: 1}}}
	for _, n := range names("s", 3) {
		fill = append(fill, filler{name: n, req: harness.GPURequest{Units: 30, Memory: harness.GiB}})
	}
	e.fillInOrder(t, ns, sched, fill)
	e.preemptAndCheck(t, ns, sched, high, harness.GPURequest{GPUs: 1}, []string{"w"})
}

// TestPreemptRespectsPDB: a GPU full of priority-0 shares that a
// PodDisruptionBudget protects; the priority-1000 pod stays Pending, its
// reason naming the budget, and nothing is evicted; once the budget is
// deleted, it preempts and is bound.
func TestPreemptRespectsPDB(t *testing.T) {
	e, ns := setup(t)
	e.nodes(t, ns+"-n", 1, 1)
	ctx := context.Background()
	// The budget exists before the scheduler starts: its informers list it
	// before it schedules anything, so it sees the budget when the pod
	// arrives (no wait for a watch event).
	four := intstr.FromInt32(4)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keep-batch"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &four, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "batch"}}}}
	if _, err := e.cp.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sched := ns + "-sched"
	e.startScheduler(t, sched, staticRows)
	high := e.priorityClass(t, ns, 1000)
	var fill []filler
	for _, n := range names("b", 4) {
		fill = append(fill, filler{name: n, req: harness.GPURequest{Units: 25, Memory: harness.GiB}, mut: []func(*corev1.Pod){withLabel("app", "batch")}})
	}
	e.fillInOrder(t, ns, sched, fill)
	before := e.present(t, ns)
	e.createPod(t, ns, "hi", sched, harness.GPURequest{Units: 50, Memory: harness.GiB}, high)
	msg := e.waitReason(t, ns, "hi", "PodDisruptionBudget "+ns+"/keep-batch")
	t.Logf("pending: %s", msg)
	e.stayPending(t, ns, "hi", 2*time.Second)
	if got := e.present(t, ns); !slices.Equal(got, append(slices.Clone(before), "hi")) {
		t.Fatalf("pods %v after a preemption a PDB forbids; want %v and hi", got, before)
	}
	if err := e.cp.Client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "keep-batch", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.nudgeUntilBound(t, ns, "hi")
	if left := len(e.present(t, ns)); left != 3 {
		t.Fatalf("%d pods left after the budget went, want 3 (two of 25 units evicted)", left)
	}
	e.checkBooks(t, ns, ns+"-n")
}

// nudgeUntilBound waits until the pod is bound. No scheduler plugin
// requeues pods on PodDisruptionBudget events, and when the scheduler's
// informer sees a budget go is not observable: the pod is updated (a label)
// at each poll until it is bound, as each update of the pod itself retries
// it at once.
func (e *env) nudgeUntilBound(t *testing.T, ns, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	i := 0
	err := harness.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		p, err := e.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Spec.NodeName != "" {
			return err == nil, nil
		}
		i++
		patch := []byte(`{"metadata":{"labels":{"retry":"` + strconv.Itoa(i) + `"}}}`)
		_, err = e.cp.Client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return false, err
	})
	if err != nil {
		t.Fatalf("%s/%s not bound after the budget went: %v", ns, name, err)
	}
}

// waitReason waits until the pod's PodScheduled condition message contains
// want and returns it.
func (e *env) waitReason(t *testing.T, ns, name, want string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var msg string
	err := harness.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		p, err := e.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		msg = scheduledMessage(p)
		return strings.Contains(msg, want), nil
	})
	if err != nil {
		t.Fatalf("pod %s: reason %q does not name %q: %v", name, msg, want, err)
	}
	return msg
}
