package api

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func shareMaxPod(v *string) *corev1.Pod {
	p := &corev1.Pod{}
	if v != nil {
		p.ObjectMeta = metav1.ObjectMeta{Annotations: map[string]string{AnnotationShareMax: *v}}
	}
	return p
}

func TestParseShareMax(t *testing.T) {
	good := map[string]float64{"40%": 0.4, "40": 0.4, "1%": 0.01, "1": 0.01, "100%": 1, "100": 1, "12.5%": 0.125,
		"33.33%": 0.3333, "99.99%": 0.9999, "7%": 0.07}
	for v, want := range good {
		got, err := ParseShareMax(shareMaxPod(&v))
		if err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", v, got, err, want)
		}
	}
	if got, err := ParseShareMax(shareMaxPod(nil)); got != 0 || err != nil {
		t.Errorf("absent: %v %v", got, err)
	}
	for _, v := range []string{"", "0", "0%", "0.5%", "0.99%", "101", "101%", "100.01%", "1000%", "40 %", " 40%", "40%\n",
		"+40%", "-40%", "040%", "40.%", ".5%", "12.5", "12.345%", "4e1%", "0x28", "40%%", "forty", "NaN%", "Inf",
		"1" + strings.Repeat("0", 30), "40％"} {
		_, err := ParseShareMax(shareMaxPod(&v))
		if !errors.Is(err, ErrInvalidShareMax) || !strings.Contains(err.Error(), AnnotationShareMax) {
			t.Errorf("%q: error %v", v, err)
		}
	}
}

func FuzzParseShareMax(f *testing.F) {
	for _, s := range []string{"40%", "40", "12.5%", "0", "100.00%", "1e2%", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseShareMax(shareMaxPod(&s))
		if err != nil {
			if !errors.Is(err, ErrInvalidShareMax) || got != 0 {
				t.Fatalf("%q: %v, %v", s, got, err)
			}
			return
		}
		if got < 0.01 || got > 1 {
			t.Fatalf("%q: %v out of [1%%, 100%%]", s, got)
		}
	})
}
