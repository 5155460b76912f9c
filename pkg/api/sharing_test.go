package api

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseSharing(t *testing.T) {
	cases := []struct {
		ann     map[string]string
		want    SharingMode
		wantErr bool
	}{
		{ann: nil, want: ""},
		{ann: map[string]string{AnnotationSharing: "mps"}, want: SharingMPS},
		{ann: map[string]string{AnnotationSharing: "timeslice"}, want: SharingTimeslice},
		{ann: map[string]string{AnnotationSharing: "MPS"}, wantErr: true},
		{ann: map[string]string{AnnotationSharing: ""}, wantErr: true},
	}
	for _, tc := range cases {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}}
		got, err := ParseSharing(pod)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%v: got %q, %v; want %q, error %v", tc.ann, got, err, tc.want, tc.wantErr)
		}
		if tc.wantErr {
			pod.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{ResourceGPU: resource.MustParse("1")}}}}
			if _, err := ParseRequest(pod); !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("%v: ParseRequest error %v, want ErrInvalidRequest", tc.ann, err)
			}
		}
	}
}

func TestSharingAccepts(t *testing.T) {
	for _, tc := range []struct {
		gpu, want SharingMode
		ok        bool
	}{
		{"", "", true}, {"", SharingTimeslice, true}, {"", SharingMPS, false},
		{SharingMPS, "", true}, {SharingMPS, SharingMPS, true}, {SharingMPS, SharingTimeslice, false},
	} {
		if got := tc.gpu.Accepts(tc.want); got != tc.ok {
			t.Errorf("%q accepts %q = %v, want %v", tc.gpu, tc.want, got, tc.ok)
		}
	}
	if got := MPSUnits(DefaultMPSUnitsPerClient, MPSClientLimit, DefaultMPSServers); got != 96 {
		t.Errorf("MPSUnits = %d, want 96", got)
	}
}
