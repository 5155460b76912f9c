package paths

import (
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
	if got := GroupStateFile("/r", "g"); got != "/r/groups/g/gpu.state" {
		t.Fatalf("GroupStateFile = %q", got)
	}
}
