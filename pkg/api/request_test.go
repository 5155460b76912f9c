package api

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func podWith(limits map[corev1.ResourceName]string) *corev1.Pod {
	rl := corev1.ResourceList{}
	for k, v := range limits {
		rl[k] = resource.MustParse(v)
	}
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "main", Resources: corev1.ResourceRequirements{Limits: rl}},
		{Name: "nogpu"},
	}}}
}

func TestParseRequest(t *testing.T) {
	cases := map[string]struct {
		limits map[corev1.ResourceName]string
		want   *ContainerRequest
	}{
		"none":          {map[corev1.ResourceName]string{"cpu": "1"}, nil},
		"whole":         {map[corev1.ResourceName]string{ResourceGPU: "2"}, &ContainerRequest{Name: "main", Count: 2, Whole: true}},
		"memory share":  {map[corev1.ResourceName]string{ResourceMemory: "8Gi"}, &ContainerRequest{Name: "main", Count: 1, MemoryBytes: 8 << 30}},
		"units share":   {map[corev1.ResourceName]string{ResourceUnits: "30"}, &ContainerRequest{Name: "main", Count: 1, Units: 30}},
		"share on two":  {map[corev1.ResourceName]string{ResourceGPU: "2", ResourceUnits: "50", ResourceMemory: "1Gi"}, &ContainerRequest{Name: "main", Count: 2, Units: 50, MemoryBytes: 1 << 30}},
		"explicit zero": {map[corev1.ResourceName]string{ResourceGPU: "0"}, nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := ParseRequest(podWith(tc.limits))
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if !r.Empty() {
					t.Fatalf("got %+v, want empty", r)
				}
				return
			}
			if len(r.Containers) != 1 || r.Containers[0] != *tc.want {
				t.Fatalf("got %+v, want %+v", r.Containers, *tc.want)
			}
		})
	}
}

func TestParseRequestErrors(t *testing.T) {
	cases := map[string]struct {
		pod  func() *corev1.Pod
		want string
	}{
		"unknown name": {func() *corev1.Pod { return podWith(map[corev1.ResourceName]string{"gpuslice.io/gpus": "1"}) }, "unknown resource gpuslice.io/gpus"},
		"fraction":     {func() *corev1.Pod { return podWith(map[corev1.ResourceName]string{ResourceUnits: "500m"}) }, "whole number"},
		"too many":     {func() *corev1.Pod { return podWith(map[corev1.ResourceName]string{ResourceGPU: "65"}) }, "at most 64"},
		"placement": {func() *corev1.Pod {
			p := podWith(map[corev1.ResourceName]string{ResourceGPU: "1"})
			p.Annotations = map[string]string{AnnotationPlacement: "tightest"}
			return p
		}, `"tightest"`},
		"init container": {func() *corev1.Pod {
			p := podWith(nil)
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{ResourceGPU: resource.MustParse("1")}}}}
			return p
		}, "init container"},
		"request differs": {func() *corev1.Pod {
			p := podWith(map[corev1.ResourceName]string{ResourceUnits: "10"})
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{ResourceUnits: resource.MustParse("20")}
			return p
		}, "differs from limit"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseRequest(tc.pod())
			if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidRequest containing %q", err, tc.want)
			}
		})
	}
}

func TestPlacementOverride(t *testing.T) {
	p := podWith(map[corev1.ResourceName]string{ResourceGPU: "1"})
	p.Annotations = map[string]string{AnnotationPlacement: "spread"}
	r, err := ParseRequest(p)
	if err != nil || r.Placement != PlacementSpread {
		t.Fatalf("r=%+v err=%v", r, err)
	}
}

// FuzzParseQuantities feeds arbitrary quantity strings through ParseRequest:
// it never panics and never accepts a negative or fractional amount.
func FuzzParseQuantities(f *testing.F) {
	for _, s := range []string{"1", "8Gi", "500m", "-1", "1e3", "0", "99999999999999999999"} {
		f.Add(s, s, s)
	}
	f.Fuzz(func(t *testing.T, gpu, units, mem string) {
		rl := corev1.ResourceList{}
		for name, s := range map[corev1.ResourceName]string{ResourceGPU: gpu, ResourceUnits: units, ResourceMemory: mem} {
			q, err := resource.ParseQuantity(s)
			if err != nil {
				return
			}
			rl[name] = q
		}
		r, err := ParseRequest(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: rl}}}}})
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v does not wrap ErrInvalidRequest", err)
			}
			return
		}
		for _, c := range r.Containers {
			if c.Count < 1 || c.Count > MaxGPUsPerContainer || c.Units < 0 || c.MemoryBytes < 0 || (c.Whole && (c.Units != 0 || c.MemoryBytes != 0)) {
				t.Fatalf("accepted bad request %+v", c)
			}
		}
	})
}
