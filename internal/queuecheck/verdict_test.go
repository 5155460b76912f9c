package queuecheck

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuslice/gpuslice/pkg/api"
)

func set(limits map[corev1.ResourceName]string) []PodSet {
	l := corev1.ResourceList{}
	for k, v := range limits {
		l[k] = resource.MustParse(v)
	}
	return []PodSet{{Name: "main", Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: l}}}}}}}
}

func TestVerdict(t *testing.T) {
	gpu := GPU{Units: 100, Memory: 16 << 30}
	nodes := []Node{{Name: "a", GPUs: []GPU{gpu, gpu}}, {Name: "b", GPUs: []GPU{{Units: 100, Memory: 80 << 30}}}}
	for name, tc := range map[string]struct {
		limits map[corev1.ResourceName]string
		want   string // "" = fits; else a part of the reason
	}{
		"quarter":          {map[corev1.ResourceName]string{api.ResourceUnits: "25", api.ResourceMemory: "4Gi"}, ""},
		"all units":        {map[corev1.ResourceName]string{api.ResourceUnits: "100"}, ""},
		"memory of big":    {map[corev1.ResourceName]string{api.ResourceUnits: "10", api.ResourceMemory: "40Gi"}, ""},
		"two whole":        {map[corev1.ResourceName]string{api.ResourceGPU: "2"}, ""},
		"no cpu gpus":      {map[corev1.ResourceName]string{"cpu": "1"}, ""},
		"too many units":   {map[corev1.ResourceName]string{api.ResourceUnits: "150"}, "asks for 150 units and 0 of memory of one GPU"},
		"too much memory":  {map[corev1.ResourceName]string{api.ResourceUnits: "25", api.ResourceMemory: "90Gi"}, "no GPU in the cluster can hold"},
		"big on two":       {map[corev1.ResourceName]string{api.ResourceGPU: "2", api.ResourceMemory: "40Gi"}, "on each of 2 GPUs of one node"},
		"three whole":      {map[corev1.ResourceName]string{api.ResourceGPU: "3"}, "3 whole GPUs on one node"},
		"unknown resource": {map[corev1.ResourceName]string{"gpuslice.io/gpu-unit": "25"}, "unknown resource gpuslice.io/gpu-unit"},
		"fraction":         {map[corev1.ResourceName]string{api.ResourceUnits: "12.5"}, "whole number"},
	} {
		t.Run(name, func(t *testing.T) {
			got := Verdict(set(tc.limits), nodes)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("Verdict = %q, want %q", got, tc.want)
			}
		})
	}
	if got := Verdict(set(map[corev1.ResourceName]string{api.ResourceUnits: "1"}), nil); !strings.Contains(got, "the cluster has no GPUs") {
		t.Fatalf("no nodes: %q", got)
	}
	mps := []Node{{Name: "m", GPUs: []GPU{{Units: 96, Memory: 16 << 30, Sharing: api.SharingMPS}}}}
	ps := set(map[corev1.ResourceName]string{api.ResourceUnits: "25"})
	ps[0].Template.Annotations = map[string]string{api.AnnotationSharing: string(api.SharingTimeslice)}
	if got := Verdict(ps, mps); !strings.Contains(got, "no GPU") {
		t.Fatalf("timeslice pod, mps GPUs only: %q", got)
	}
}

func TestQueueProblems(t *testing.T) {
	q := func(name, nominal string, borrowing string, cohort bool) Quota {
		out := Quota{Flavor: "f", Name: corev1.ResourceName(name), Nominal: resource.MustParse(nominal), InCohort: cohort}
		if borrowing != "" {
			b := resource.MustParse(borrowing)
			out.Borrowing = &b
		}
		return out
	}
	for name, tc := range map[string]struct {
		quotas []Quota
		want   []string
	}{
		"good":            {[]Quota{q(string(api.ResourceUnits), "150", "100", true), q(string(api.ResourceMemory), "60Gi", "", true), q("cpu", "0.5", "", false)}, nil},
		"unknown name":    {[]Quota{q("gpuslice.io/gpu-unit", "100", "", false)}, []string{"flavor f: gpuslice.io/gpu-unit is not a resource gpuslice serves"}},
		"fractional":      {[]Quota{q(string(api.ResourceUnits), "12.5", "", false)}, []string{"nominal quota 12500m is not a whole number"}},
		"tiny memory":     {[]Quota{q(string(api.ResourceMemory), "512Ki", "", false)}, []string{"gpu-memory quota 512Ki (with its borrowing limit) is smaller than one share (1Mi)"}},
		"tiny, borrows":   {[]Quota{q(string(api.ResourceMemory), "512Ki", "", true)}, nil},
		"tiny, limited":   {[]Quota{q(string(api.ResourceMemory), "0", "512Ki", true)}, []string{"smaller than one share"}},
		"zero is a queue": {[]Quota{q(string(api.ResourceUnits), "0", "", false)}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			got := QueueProblems(tc.quotas)
			if len(got) != len(tc.want) {
				t.Fatalf("QueueProblems = %q, want %q", got, tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Fatalf("QueueProblems = %q, want %q", got, tc.want)
				}
			}
		})
	}
}

func TestMemoryVerdict(t *testing.T) {
	q := QueueRatio{Name: "team", Units: 100, Memory: 16 << 30, UnitsMost: 200, MemoryMost: 32 << 30, HasUnits: true, HasMemory: true}
	for name, tc := range map[string]struct {
		share ClaimShare
		q     QueueRatio
		want  string
	}{
		"at the ratio":     {ClaimShare{Units: 25, Memory: 4 << 30}, q, ""},
		"below":            {ClaimShare{Units: 50, Memory: 1 << 30}, q, ""},
		"over nominal":     {ClaimShare{Template: "t", Request: "gpu", Units: 25, Memory: 8 << 30}, q, `ResourceClaimTemplate t, request "gpu": 25 units and 8Gi of memory; ClusterQueue team's quota (100 units, 16Gi; with borrowing 200, 32Gi) allows at most 4Gi with 25 units`},
		"over borrowing":   {ClaimShare{Units: 100, Memory: 15 << 30}, QueueRatio{Name: "b", Units: 100, Memory: 16 << 30, UnitsMost: 200, MemoryMost: 16 << 30, HasUnits: true, HasMemory: true}, "allows at most 8Gi with 100 units"},
		"units only queue": {ClaimShare{Units: 1, Memory: 80 << 30}, QueueRatio{Units: 100, HasUnits: true}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			got := MemoryVerdict([]ClaimShare{tc.share}, tc.q)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("MemoryVerdict = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRatioOf(t *testing.T) {
	b := resource.MustParse("100")
	bm := resource.MustParse("8Gi")
	got := ratioOf("q", []Quota{
		{Name: api.ResourceUnits, Nominal: resource.MustParse("200"), Borrowing: &b, InCohort: true},
		{Name: api.ResourceMemory, Nominal: resource.MustParse("16Gi"), Borrowing: &bm, InCohort: true},
	})
	want := QueueRatio{Name: "q", Units: 200, Memory: 16 << 30, UnitsMost: 300, MemoryMost: 24 << 30, HasUnits: true, HasMemory: true}
	if got != want {
		t.Fatalf("ratioOf = %+v, want %+v", got, want)
	}
	got = ratioOf("q", []Quota{
		{Name: api.ResourceUnits, Nominal: resource.MustParse("200"), InCohort: true},
		{Name: api.ResourceMemory, Nominal: resource.MustParse("16Gi"), Borrowing: &bm, InCohort: true},
	})
	if got.UnitsMost != 0 || got.MemoryMost != 0 {
		t.Fatalf("unlimited units borrowing: %+v, want the nominal ratio alone", got)
	}
}
