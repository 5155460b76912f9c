package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLabel(t *testing.T) {
	labels := `code="201",component="apiserver",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"`
	for _, c := range []struct{ name, want string }{
		{"verb", "POST"}, {"resource", "pods"}, {"subresource", "binding"}, {"group", ""}, {"missing", ""}, {"code", "201"},
	} {
		if got := label(labels, c.name); got != c.want {
			t.Errorf("label(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	// A label whose name ends another's is not taken for it.
	if got := label(`subresource="status",resource="pods"`, "resource"); got != "pods" {
		t.Errorf("resource = %q, want pods", got)
	}
}

func TestAuditWrites(t *testing.T) {
	log := `{"verb":"create","userAgent":"bench/v0.0.0 (linux/amd64)","objectRef":{"resource":"pods"}}
{"verb":"patch","userAgent":"kwok/v0.8.0","objectRef":{"resource":"pods","subresource":"status"}}
not json
{"verb":"patch","userAgent":"kwok/v0.8.0","objectRef":{"resource":"pods","subresource":"status"}}
`
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte("{\"verb\":\"delete\",\"userAgent\":\"before\"}\n"+log), 0o600); err != nil {
		t.Fatal(err)
	}
	from := int64(len("{\"verb\":\"delete\",\"userAgent\":\"before\"}\n"))
	got := auditWrites(path, from, from+int64(len(log)))
	if want := "kwok patch pods/status 2, bench create pods 1"; got != want {
		t.Errorf("auditWrites = %q, want %q", got, want)
	}
	if got := auditWrites(path, 10, 10); got != "" {
		t.Errorf("empty range gives %q", got)
	}
}
