package version

import (
	"strings"
	"testing"
)

func TestRequested(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--version"}, true},
		{[]string{"-v", "2", "-version"}, true},
		{[]string{"--version=true"}, true},
		{[]string{"--version=false"}, false},
		{[]string{"--", "--version"}, false},
		{[]string{"--versions"}, false},
	} {
		if got := Requested(tc.args); got != tc.want {
			t.Errorf("Requested(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestString(t *testing.T) {
	if s := String("gpuslice-node"); !strings.HasPrefix(s, "gpuslice-node "+Get()+" (go") {
		t.Fatalf("String = %q", s)
	}
}
