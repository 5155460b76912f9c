package queuecheck

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpuslice/gpuslice/pkg/api"
)

func obj(t testing.TB, s string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(s), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestPendingChecks(t *testing.T) {
	u := obj(t, `{"status":{"admissionChecks":[{"name":"gpuslice-fits","state":"Pending"},{"name":"other","state":"Pending"},
		{"name":"done","state":"Ready"},{"name":7},"junk"]}}`)
	got := pendingChecks(u, map[string]bool{"gpuslice-fits": true, "done": true})
	if !reflect.DeepEqual(got, []string{"gpuslice-fits"}) {
		t.Fatalf("pendingChecks = %q", got)
	}
}

func TestPodSets(t *testing.T) {
	u := obj(t, `{"metadata":{"name":"w"},"spec":{"podSets":[{"name":"main","count":1,"template":{"spec":{"containers":[
		{"name":"c","resources":{"limits":{"gpuslice.io/gpu-units":"25"}}}]}}}]}}`)
	sets, err := podSets(u)
	if err != nil || len(sets) != 1 || sets[0].Name != "main" {
		t.Fatalf("podSets = %+v, %v", sets, err)
	}
	q := sets[0].Template.Spec.Containers[0].Resources.Limits[api.ResourceUnits]
	if q.Value() != 25 {
		t.Fatalf("units %s", q.String())
	}
	if _, err := podSets(obj(t, `{"metadata":{"name":"w"},"spec":{"podSets":["x"]}}`)); err == nil {
		t.Fatal("a pod set that is not an object: no error")
	}
	if _, err := podSets(obj(t, `{"metadata":{"name":"w"},"spec":{"podSets":[{"name":"m","template":{"spec":{"containers":"no"}}}]}}`)); err == nil {
		t.Fatal("a template of the wrong shape: no error")
	}
}

func TestQuotasOf(t *testing.T) {
	u := obj(t, `{"spec":{"cohortName":"gpus","resourceGroups":[{"flavors":[{"name":"f","resources":[
		{"name":"gpuslice.io/gpu-units","nominalQuota":200,"borrowingLimit":100},
		{"name":"gpuslice.io/gpu-memory","nominalQuota":"16Gi"},
		{"name":"gpuslice.io/gpu-unit","nominalQuota":"not a quantity"}]}]}]}}`)
	got := quotasOf(u)
	if len(got) != 3 || !got[0].InCohort || got[0].Nominal.Value() != 200 || got[0].Borrowing == nil || got[0].Borrowing.Value() != 100 ||
		got[1].Borrowing != nil || got[1].Nominal.Cmp(resource.MustParse("16Gi")) != 0 || !got[2].Nominal.IsZero() {
		t.Fatalf("quotasOf = %+v", got)
	}
	if p := QueueProblems(got); len(p) != 1 {
		t.Fatalf("QueueProblems = %q, want the unserved name alone", p)
	}
}

// FuzzQueueObjects: whatever a ClusterQueue or Workload holds, reading it
// neither panics nor loops.
func FuzzQueueObjects(f *testing.F) {
	f.Add(`{"spec":{"resourceGroups":[{"flavors":[{"name":"f","resources":[{"name":"gpuslice.io/gpu-units","nominalQuota":1.5}]}]}]}}`)
	f.Add(`{"spec":{"podSets":[{"name":"m","template":{"spec":{"containers":[{"name":"c","resources":{"limits":{"gpuslice.io/gpu-memory":"1e+40"}}}]}}}]},"status":{"admissionChecks":[{"name":"a","state":"Pending"}]}}`)
	f.Fuzz(func(t *testing.T, s string) {
		u := &unstructured.Unstructured{}
		if json.Unmarshal([]byte(s), &u.Object) != nil || u.Object == nil {
			return
		}
		_ = QueueProblems(quotasOf(u))
		_ = ratioOf("q", quotasOf(u))
		_ = pendingChecks(u, map[string]bool{"a": true})
		if sets, err := podSets(u); err == nil {
			_ = Verdict(sets, []Node{{Name: "n", GPUs: []GPU{{Units: 100, Memory: 16 << 30}}}})
		}
	})
}
