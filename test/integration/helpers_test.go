//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

func (e *env) createPod(t *testing.T, ns, name, sched string, r harness.GPURequest, mut ...func(*corev1.Pod)) {
	t.Helper()
	p := harness.Pod(ns, name, sched, r)
	p.Spec.NodeSelector = map[string]string{groupLabel: ns}
	for _, m := range mut {
		m(p)
	}
	if _, err := e.cp.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitBound waits until the named pods are bound and returns them. The wait
// grows with the number of pods (the scheduler binds them one by one, slower
// on a loaded machine); a failure says how many are left and why.
func (e *env) waitBound(t *testing.T, ns string, names ...string) map[string]*corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second+time.Duration(len(names))*200*time.Millisecond)
	defer cancel()
	out := map[string]*corev1.Pod{}
	var unbound []string
	why := map[string]string{}
	err := harness.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		list, err := e.cp.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		byName := make(map[string]*corev1.Pod, len(list.Items))
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		unbound = unbound[:0]
		for _, n := range names {
			p := byName[n]
			if p == nil || p.Spec.NodeName == "" {
				unbound = append(unbound, n)
				if p != nil {
					why[n] = scheduledMessage(p)
				}
				continue
			}
			out[n] = p
		}
		return len(unbound) == 0, nil
	})
	if err != nil {
		first := unbound[:min(len(unbound), 5)]
		msgs := make([]string, 0, len(first))
		for _, n := range first {
			msgs = append(msgs, fmt.Sprintf("%s: %q", n, why[n]))
		}
		t.Fatalf("%d of %d pods not bound: %v; e.g. %s", len(unbound), len(names), err, strings.Join(msgs, "; "))
	}
	return out
}

// scheduledMessage is the reason a pod is not scheduled (its PodScheduled
// condition), or "" if the scheduler has not said.
func scheduledMessage(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

// assignment parses a bound pod's annotation.
func assignment(t *testing.T, p *corev1.Pod) *api.Assignment {
	t.Helper()
	a, err := api.ParseAssignment(p.Annotations[api.AnnotationAssignment])
	if err != nil {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	if a.Node != p.Spec.NodeName {
		t.Fatalf("pod %s bound to %s, assignment says %s", p.Name, p.Spec.NodeName, a.Node)
	}
	return a
}

// waitEvent waits for an event with reason on the pod and returns its note.
func (e *env) waitEvent(t *testing.T, ns, pod, reason string) string {
	t.Helper()
	return e.waitEventWith(t, ns, pod, reason)
}

// waitEventWith waits for an event with reason on the pod whose note
// contains every one of want, and returns the note.
func (e *env) waitEventWith(t *testing.T, ns, pod, reason string, want ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var note string
	err := harness.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		evs, err := e.cp.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			if ev.Regarding.Name == pod && ev.Reason == reason && containsAll(ev.Note, want) {
				note = ev.Note
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event on pod %s with %q: %v", reason, pod, want, err)
	}
	return note
}

// stayPending checks the pod is still unbound after d.
func (e *env) stayPending(t *testing.T, ns, name string, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	p, err := e.cp.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("pod %s was bound to %s, want pending", name, p.Spec.NodeName)
	}
}

func (e *env) checkBooks(t *testing.T, ns, prefix string) *harness.Books {
	t.Helper()
	b, err := harness.ReadBooks(context.Background(), e.cp, ns, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Problems) > 0 {
		t.Fatalf("books from the API server:\n%s", strings.Join(b.Problems, "\n"))
	}
	return b
}

func (e *env) deletePod(t *testing.T, ns, name string) {
	t.Helper()
	zero := int64(0)
	if err := e.cp.Client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

func containsAll(s string, want []string) bool {
	for _, w := range want {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}
