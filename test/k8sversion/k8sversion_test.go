package k8sversion

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"v1.35.4\n", "v1.35.4", true},
		{"v1.35.4", "v1.35.4", true},
		{"1.35.4\n", "", false},
		{"v1.35\n", "", false},
		{"v1.35.4\nv1.36.0\n", "", false},
		{"v1.35.4; rm -rf /\n", "", false},
		{"", "", false},
	} {
		got, err := Parse([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// requires returns the versions a go.mod requires or replaces k8s.io modules with.
func requires(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		for _, kw := range []string{"require ", "replace "} {
			line = strings.TrimPrefix(line, kw)
		}
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && strings.HasPrefix(f[0], "k8s.io/") && strings.HasPrefix(f[1], "v"):
			out[f[0]] = append(out[f[0]], f[1]) // require k8s.io/x v...
		case len(f) >= 4 && strings.HasPrefix(f[0], "k8s.io/") && f[1] == "=>" && strings.HasPrefix(f[3], "v"):
			out[f[0]] = append(out[f[0]], f[3]) // replace k8s.io/x => k8s.io/x v...
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Both modules build against the version the file names: k8s.io/kubernetes at
// it, its staging modules (k8s.io/api, client-go, ...) at v0.<minor>.<patch>.
func TestModulesPinTheVersion(t *testing.T) {
	v, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	staging := "v0." + strings.TrimPrefix(v, "v1.")
	root := filepath.Join("..", "..")
	for _, mod := range []string{"go.mod", "hack/k8s/go.mod"} {
		reqs := requires(t, filepath.Join(root, mod))
		if got := reqs["k8s.io/kubernetes"]; len(got) == 0 || got[0] != v {
			t.Errorf("%s: k8s.io/kubernetes %v, want %s (%s)", mod, got, v, File)
		}
		for _, m := range []string{"k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "k8s.io/component-base"} {
			for _, got := range reqs[m] {
				if got != staging {
					t.Errorf("%s: %s %s, want %s (%s names %s)", mod, m, got, staging, File, v)
				}
			}
		}
	}
}
