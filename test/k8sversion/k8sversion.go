// Package k8sversion reads the Kubernetes version the tests run against from
// hack/k8s/version, the one place that names it (make, hack/k8s/build.sh and
// test/node-e2e/build-kubelet.sh read the same file).
package k8sversion

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// File is the version file, relative to the repository root.
const File = "hack/k8s/version"

var valid = regexp.MustCompile(`^v1\.[0-9]+\.[0-9]+$`)

// Read returns the version named in hack/k8s/version, looked up from the
// working directory upwards (go test runs in the package's directory).
func Read() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("k8sversion: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, File))
		if err == nil {
			return Parse(b)
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("k8sversion: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("k8sversion: no %s above the working directory", File)
		}
		dir = parent
	}
}

// Parse checks the file's content: one line, v1.<minor>.<patch>.
func Parse(b []byte) (string, error) {
	v := strings.TrimSpace(string(b))
	if !valid.MatchString(v) {
		return "", fmt.Errorf("k8sversion: %s holds %q, want v1.<minor>.<patch>", File, v)
	}
	return v, nil
}
