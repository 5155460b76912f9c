package api

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseSlicing(t *testing.T) {
	prio := func(v int32) *int32 { return &v }
	cases := map[string]struct {
		ann      map[string]string
		priority *int32
		want     Slicing
		bad      bool
	}{
		"defaults":             {want: Slicing{Priority: PriorityLow}},
		"class above zero":     {priority: prio(1000), want: Slicing{Priority: PriorityHigh}},
		"class zero":           {priority: prio(0), want: Slicing{Priority: PriorityLow}},
		"class negative":       {priority: prio(-5), want: Slicing{Priority: PriorityLow}},
		"annotation wins":      {ann: map[string]string{AnnotationPriority: "low"}, priority: prio(1000), want: Slicing{Priority: PriorityLow}},
		"high":                 {ann: map[string]string{AnnotationPriority: "high"}, want: Slicing{Priority: PriorityHigh}},
		"slice":                {ann: map[string]string{AnnotationSlice: "20ms"}, want: Slicing{Priority: PriorityLow, Slice: 20 * time.Millisecond}},
		"bad priority":         {ann: map[string]string{AnnotationPriority: "HIGH"}, bad: true},
		"empty priority":       {ann: map[string]string{AnnotationPriority: ""}, bad: true},
		"slice too short":      {ann: map[string]string{AnnotationSlice: "10us"}, bad: true},
		"slice too long":       {ann: map[string]string{AnnotationSlice: "11s"}, bad: true},
		"slice not a duration": {ann: map[string]string{AnnotationSlice: "20"}, bad: true},
		"slice negative":       {ann: map[string]string{AnnotationSlice: "-20ms"}, bad: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}, Spec: corev1.PodSpec{Priority: tc.priority}}
			got, err := ParseSlicing(pod)
			if tc.bad {
				if !errors.Is(err, ErrInvalidSlicing) {
					t.Fatalf("err = %v, want ErrInvalidSlicing", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestParseRequestRejectsBadSlicing(t *testing.T) {
	pod := podWith(map[corev1.ResourceName]string{ResourceUnits: "25"})
	pod.Annotations = map[string]string{AnnotationPriority: "urgent"}
	if _, err := ParseRequest(pod); !errors.Is(err, ErrInvalidRequest) || !errors.Is(err, ErrInvalidSlicing) {
		t.Fatalf("err = %v", err)
	}
	pod = podWith(map[corev1.ResourceName]string{"cpu": "1"})
	pod.Annotations = map[string]string{AnnotationPriority: "urgent"}
	if _, err := ParseRequest(pod); err != nil {
		t.Fatalf("a pod asking no GPU is not checked: %v", err)
	}
}

func FuzzParseSlicing(f *testing.F) {
	for _, s := range []string{"high", "low", "20ms", "", "1h", "100us"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, p, sl string) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationPriority: p, AnnotationSlice: sl}}}
		s, err := ParseSlicing(pod)
		if err != nil {
			return
		}
		if s.Priority != PriorityHigh && s.Priority != PriorityLow || s.Slice < MinSlice || s.Slice > MaxSlice {
			t.Fatalf("accepted %+v from %q %q", s, p, sl)
		}
	})
}
