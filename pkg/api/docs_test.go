package api

import (
	"os"
	"regexp"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestDocsPods parses every pod spec in docs/pods.md as written.
func TestDocsPods(t *testing.T) {
	b, err := os.ReadFile("../../docs/pods.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(b, -1)
	if len(blocks) != 5 {
		t.Fatalf("%d yaml blocks, want 5", len(blocks))
	}
	pods := map[string]*corev1.Pod{}
	for _, m := range blocks {
		var p corev1.Pod
		if err := yaml.UnmarshalStrict(m[1], &p); err != nil {
			t.Fatalf("%s\n%v", m[1], err)
		}
		req, err := ParseRequest(&p)
		if err != nil || req.Empty() {
			t.Fatalf("%s: request %+v, %v", p.Name, req, err)
		}
		pods[p.Name+"/"+p.Annotations[AnnotationUnits]+p.Annotations[AnnotationGPUs]] = &p
	}
	c := func(name string) ContainerRequest {
		t.Helper()
		p := pods[name]
		if p == nil {
			t.Fatalf("no pod %s in the docs", name)
		}
		req, _ := ParseRequest(p)
		return req.Containers[0]
	}
	if got := c("quarter/"); got != (ContainerRequest{Name: "main", Count: 1, Units: 25, MemoryBytes: 10 << 30}) {
		t.Errorf("fraction: %+v", got)
	}
	if s, err := ParseSlicing(pods["serve/"]); err != nil || s.Priority != PriorityHigh {
		t.Errorf("priority: %+v %v", s, err)
	}
	live := pods["quarter/50"]
	if u, err := ParseUnitsWant(live.Annotations[AnnotationUnits]); err != nil || u[0].Value != 50 {
		t.Errorf("live units: %v %v", u, err)
	}
	if m, err := ParseMemoryWant(live.Annotations[AnnotationMemory]); err != nil || m[0].Value != 12<<30 {
		t.Errorf("live memory: %v %v", m, err)
	}
	if m, err := ParseShareMax(pods["steady/"]); err != nil || m != 0.4 || c("steady/").Units != 25 {
		t.Errorf("ceiling: %v %v", m, err)
	}
	if n, err := ParseGPUs(pods["train/3"].Annotations[AnnotationGPUs]); err != nil || n[0].Count != 3 {
		t.Errorf("gpus: %v %v", n, err)
	}
	if got := c("train/3"); !got.Whole || got.Count != 2 {
		t.Errorf("whole: %+v", got)
	}
}
