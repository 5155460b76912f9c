package api

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestLeaseName(t *testing.T) {
	long := strings.Repeat("a", 250)
	for _, tc := range []struct{ node, want string }{
		{"node-a", "gpuslice-node-a"},
		{strings.Repeat("b", 244), "gpuslice-" + strings.Repeat("b", 244)},
	} {
		if got := LeaseName(tc.node); got != tc.want {
			t.Errorf("LeaseName(%q) = %q, want %q", tc.node, got, tc.want)
		}
	}
	a, b := LeaseName(long), LeaseName(long[:249]+"c")
	if a == b || len(a) != 253 || len(validation.IsDNS1123Subdomain(a)) != 0 {
		t.Fatalf("long names: %q (%d), %q", a, len(a), b)
	}
}
