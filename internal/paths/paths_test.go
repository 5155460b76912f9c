package paths

import (
	"regexp"
	"strings"
	"testing"
)

func TestValidateGroup(t *testing.T) {
	for _, ok := range []string{"a", "train-1", "run-1234", "x.y_z", strings.Repeat("a", 64)} {
		if err := ValidateGroup(ok); err != nil {
			t.Errorf("ValidateGroup(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a/b", "..", "a b", strings.Repeat("a", 65)} {
		if err := ValidateGroup(bad); err == nil {
			t.Errorf("ValidateGroup(%q) accepted", bad)
		}
	}
}

func TestRunDirOverride(t *testing.T) {
	env := map[string]string{"GPUSLICE_RUN_DIR": "/x/y"}
	if got := RunDir(func(k string) string { return env[k] }); got != "/x/y" {
		t.Fatalf("RunDir = %q", got)
	}
}

// FuzzValidateGroup: the hand-written check accepts exactly what the documented expression does.
func FuzzValidateGroup(f *testing.F) {
	re := regexp.MustCompile(`^[a-z0-9]([-a-z0-9_.]{0,62}[a-z0-9])?$`)
	for _, s := range []string{"a", "a-b", "a.", "-a", "A", strings.Repeat("a", 64), strings.Repeat("a", 65), "a_b.c-d", "", "a\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidateGroup(s) == nil, re.MatchString(s); got != want {
			t.Fatalf("ValidateGroup(%q) ok=%v, the expression says %v", s, got, want)
		}
	})
}
