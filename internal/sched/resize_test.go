package sched

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/resize"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// wholePod is pod uid bound to n1 holding whole GPUs idx.
func wholePod(t *testing.T, uid string, idx ...int32) (*corev1.Pod, *api.Assignment, string) {
	t.Helper()
	a := &api.Assignment{Version: api.AssignmentVersion, Node: "n1", Containers: []api.ContainerAssignment{{Name: "main"}}}
	for _, i := range idx {
		a.Containers[0].GPUs = append(a.Containers[0].GPUs, api.GPUAssignment{Index: i, UUID: "n1-" + string(rune('a'+i)), Units: 100, MemoryBytes: 1 << 34, Exclusive: true})
	}
	b, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{}
	p.UID, p.Name, p.Spec.NodeName = types.UID(uid), uid, "n1"
	p.Annotations = map[string]string{api.AnnotationAssignment: string(b)}
	return p, a, string(b)
}

var oneWhole = &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: 1, Whole: true}}}

// resizeSetup: node n1 with gpus GPUs, pod "p" bound holding idx.
func resizeSetup(t *testing.T, gpus int, idx ...int32) (*Books, *corev1.Pod, *api.Assignment, string) {
	t.Helper()
	l, _ := newBooks(t)
	if err := setGPUNode(l, gpuNode("n1", gpus, t0)); err != nil {
		t.Fatal(err)
	}
	p, a, raw := wholePod(t, "p", idx...)
	if err := l.ObservePod(p); err != nil {
		t.Fatal(err)
	}
	return l, p, a, raw
}

func planTo(a *api.Assignment, n int) func([]v1alpha2.GPU) *api.Assignment {
	return func(free []v1alpha2.GPU) *api.Assignment {
		out, _, changed := resize.Plan(a, map[string]int{"main": n}, free)
		if !changed {
			return nil
		}
		return out
	}
}

func heldBy(l *Books, uid string) string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return indicesOf(l.books.Holding(uid))
}

func indicesOf(a *api.Assignment) string {
	if a == nil {
		return "none"
	}
	var s []string
	for _, c := range a.Containers {
		for _, g := range c.GPUs {
			s = append(s, string(rune('0'+g.Index)))
		}
	}
	return strings.Join(s, ",")
}

func TestResizeGrantIsBookedBeforeTheWrite(t *testing.T) {
	l, _, a, raw := resizeSetup(t, 2, 0)
	to, err := l.BeginResize("p", raw, a, planTo(a, 2))
	if err != nil || indicesOf(to) != "0,1" {
		t.Fatalf("BeginResize = %v, %v", indicesOf(to), err)
	}
	if _, err := l.Reserve("new", "n1", oneWhole); err == nil {
		t.Fatal("a new pod got the GPU being granted")
	}
	b, _ := to.Marshal()
	l.EndResize("p", string(b), true)
	if got := heldBy(l, "p"); got != "0,1" {
		t.Fatalf("after the write p holds %s", got)
	}
	if _, err := l.Reserve("new", "n1", oneWhole); err == nil {
		t.Fatal("a new pod got a granted GPU")
	}
}

func TestResizeFailedWriteRollsBack(t *testing.T) {
	l, _, a, raw := resizeSetup(t, 2, 0)
	if _, err := l.BeginResize("p", raw, a, planTo(a, 2)); err != nil {
		t.Fatal(err)
	}
	l.EndResize("p", "", false)
	if got := heldBy(l, "p"); got != "0" {
		t.Fatalf("after a failed write p holds %s", got)
	}
	if got, err := l.Reserve("new", "n1", oneWhole); err != nil || indicesOf(got) != "1" {
		t.Fatalf("the rolled-back GPU is not free: %v, %v", indicesOf(got), err)
	}
}

func TestResizeShrinkFreesOnlyOnceWritten(t *testing.T) {
	l, _, a, raw := resizeSetup(t, 2, 0, 1)
	to, err := l.BeginResize("p", raw, a, planTo(a, 1))
	if err != nil || indicesOf(to) != "0" {
		t.Fatalf("BeginResize = %v, %v", indicesOf(to), err)
	}
	if _, err := l.Reserve("new", "n1", oneWhole); err == nil {
		t.Fatal("a GPU the pod still names was handed out")
	}
	b, _ := to.Marshal()
	l.EndResize("p", string(b), true)
	if got, err := l.Reserve("new", "n1", oneWhole); err != nil || indicesOf(got) != "1" {
		t.Fatalf("released GPU not free: %v, %v", indicesOf(got), err)
	}
}

func TestResizeIgnoresLateOldAnnotation(t *testing.T) {
	l, p, a, raw := resizeSetup(t, 2, 0)
	to, err := l.BeginResize("p", raw, a, planTo(a, 2))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := to.Marshal()
	if err := l.ObservePod(p); err != nil { // an update in flight during the write
		t.Fatal(err)
	}
	l.EndResize("p", string(b), true)
	if err := l.ObservePod(p); err != nil { // delivered late, from before the write
		t.Fatal(err)
	}
	if got := heldBy(l, "p"); got != "0,1" {
		t.Fatalf("a late old annotation undid the grant: p holds %s", got)
	}
	// A later pass plans from the old annotation: the books say behind.
	if _, err := l.BeginResize("p", raw, a, planTo(a, 1)); !errors.Is(err, resize.ErrBooksBehind) {
		t.Fatalf("BeginResize from a stale annotation: %v", err)
	}
	// Once the new value is seen, the old one is a real change again.
	grown := p.DeepCopy()
	grown.Annotations[api.AnnotationAssignment] = string(b)
	for _, obs := range []*corev1.Pod{grown, p} {
		if err := l.ObservePod(obs); err != nil {
			t.Fatal(err)
		}
	}
	if got := heldBy(l, "p"); got != "0" {
		t.Fatalf("after the annotation went back p holds %s", got)
	}
}

func TestResizeRollbackTakesWhatWasObserved(t *testing.T) {
	l, p, a, raw := resizeSetup(t, 3, 0)
	if _, err := l.BeginResize("p", raw, a, planTo(a, 2)); err != nil {
		t.Fatal(err)
	}
	other, _, otherRaw := wholePod(t, "p", 2)
	other.Annotations[api.AnnotationAssignment] = otherRaw
	other.UID = p.UID
	if err := l.ObservePod(other); err != nil {
		t.Fatal(err)
	}
	if got := heldBy(l, "p"); got != "0,1" {
		t.Fatalf("during the write p holds %s, want the union 0,1", got)
	}
	l.EndResize("p", "", false) // conflict: someone else wrote other
	if got := heldBy(l, "p"); got != "2" {
		t.Fatalf("after the conflict p holds %s, want what the pod says (2)", got)
	}
}

func TestResizeBooksBehindAndBadPlans(t *testing.T) {
	l, _, a, raw := resizeSetup(t, 3, 0)
	if _, err := l.BeginResize("p", raw+" ", a, planTo(a, 2)); !errors.Is(err, resize.ErrBooksBehind) {
		t.Fatalf("unseen annotation: %v", err)
	}
	if _, err := l.BeginResize("unknown", raw, a, planTo(a, 2)); !errors.Is(err, resize.ErrBooksBehind) {
		t.Fatalf("unknown pod: %v", err)
	}
	if _, _, err := reserveOther(l); err != nil {
		t.Fatal(err)
	}
	grab := func([]v1alpha2.GPU) *api.Assignment { // takes GPU 1, held by "q"
		out := *a
		out.Containers = []api.ContainerAssignment{{Name: "main", GPUs: append(a.Containers[0].GPUs[:1:1], api.GPUAssignment{Index: 1, UUID: "n1-b", Units: 100, MemoryBytes: 1 << 34, Exclusive: true})}}
		return &out
	}
	if _, err := l.BeginResize("p", raw, a, grab); err == nil || !strings.Contains(err.Error(), "not free") {
		t.Fatalf("a plan taking a held GPU: %v", err)
	}
	if got, err := l.BeginResize("p", raw, a, planTo(a, 1)); got != nil || err != nil {
		t.Fatalf("unchanged plan: %v, %v", got, err)
	}
	if _, err := l.BeginResize("p", raw, a, planTo(a, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.BeginResize("p", raw, a, planTo(a, 3)); err == nil {
		t.Fatal("two resizes of one pod in flight")
	}
	l.Release("p") // deleted meanwhile
	l.EndResize("p", "x", true)
	if got := heldBy(l, "p"); got != "none" {
		t.Fatalf("a deleted pod holds %s", got)
	}
}

// reserveOther books GPU 1 for pod "q" (binpack fills in index order).
func reserveOther(l *Books) (string, *api.Assignment, error) {
	a, err := l.Reserve("q", "n1", oneWhole)
	if err == nil && indicesOf(a) != "1" {
		err = errors.New("q got " + indicesOf(a))
	}
	return "q", a, err
}
