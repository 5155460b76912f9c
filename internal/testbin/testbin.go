// Package testbin finds the build outputs (make's bin/) that tests run.
package testbin

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir is the absolute directory of the build outputs: $GPUSLICE_BIN, else
// the bin/ of the module holding the working directory (go test runs a
// package's tests in its directory). The test skips, saying so, when one of
// files (paths in that directory) is missing.
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
			t.Skipf("needs the build outputs (run make): %v", err)
		}
	}
	return bin
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
