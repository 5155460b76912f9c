// Package testbin finds the build outputs (make's bin/) that tests run.
package testbin

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Dir is the absolute directory of the build outputs: $GPUSLICE_BIN, else
// the bin/ of the module holding the working directory (go test runs a
// package's tests in its directory). The test skips, saying so, when one of
// files (paths in that directory) is missing; in CI
// (GPUSLICE_INTEGRATION_REQUIRED=1, set by .ci/run, which builds them all)
// it fails instead.
func Dir(t testing.TB, files ...string) string {
	t.Helper()
	bin := os.Getenv("GPUSLICE_BIN")
	if bin == "" {
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(root, "bin")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(bin, f)); err != nil {
			Missing(t, fmt.Sprintf("needs the build outputs (run make): %v", err))
		}
	}
	return bin
}

// Missing ends a test that needs a build output or a setting the make target
// gives it: it skips with why, or fails in CI (GPUSLICE_INTEGRATION_REQUIRED=1,
// set by .ci/run, which builds everything): a part CI can build is never
// skipped there.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("GPUSLICE_INTEGRATION_REQUIRED") == "1" {
		t.Fatal("in CI: " + why)
	}
	t.Skip(why)
}

// moduleRoot is the nearest directory at or above the working directory
// with a go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
