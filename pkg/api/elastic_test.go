package api

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseElastic(t *testing.T) {
	cases := []struct {
		ann  map[string]string
		want Elastic
		bad  bool
	}{
		{nil, Elastic{}, false},
		{map[string]string{AnnotationMemoryMax: "20Gi"}, Elastic{Max: 20 << 30}, false},
		{map[string]string{AnnotationMemoryMax: "20Gi", AnnotationMemorySpill: "host"}, Elastic{Max: 20 << 30, Spill: true}, false},
		{map[string]string{AnnotationMemoryMax: "20Gi", AnnotationMemorySpill: "none"}, Elastic{Max: 20 << 30}, false},
		{map[string]string{AnnotationMemorySpill: "host"}, Elastic{}, true},
		{map[string]string{AnnotationMemoryMax: "lots"}, Elastic{}, true},
		{map[string]string{AnnotationMemoryMax: "-1Gi"}, Elastic{}, true},
		{map[string]string{AnnotationMemoryMax: "20Gi", AnnotationMemorySpill: "disk"}, Elastic{}, true},
	}
	for _, c := range cases {
		got, err := ParseElastic(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: c.ann}})
		if c.bad != (err != nil) || (err != nil && !errors.Is(err, ErrInvalidElastic)) || (!c.bad && got != c.want) {
			t.Errorf("%v: %+v, %v", c.ann, got, err)
		}
	}
}

func FuzzParseElastic(f *testing.F) {
	f.Add("20Gi", "host")
	f.Add("1e3", "none")
	f.Fuzz(func(t *testing.T, max, spill string) {
		e, err := ParseElastic(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			AnnotationMemoryMax: max, AnnotationMemorySpill: spill}}})
		if err == nil && e.Max == 0 {
			t.Fatalf("%q: accepted a zero ceiling", max)
		}
	})
}
