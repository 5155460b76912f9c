package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWrite: the archive is an OCI layout whose index names the image, whose
// manifest points at the config and layer by digest, and whose layer holds
// the files with their modes; two writes are byte-identical.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "tool")
	if err := os.WriteFile(src, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	img := Image{Name: "example.local/tool:1", Files: Files{"/usr/bin/tool": src}, Entrypoint: []string{"/usr/bin/tool"},
		User: "65532:65532", Labels: map[string]string{"org.opencontainers.image.version": "1"}}
	entries := untar(t, writeTwice(t, dir, img))
	var index struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(entries["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index %s: %v", entries["index.json"], err)
	}
	if got := index.Manifests[0].Annotations["io.containerd.image.name"]; got != img.Name {
		t.Fatalf("image name %q", got)
	}
	var m struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	if err := json.Unmarshal(entries[blobPath(index.Manifests[0].Digest)], &m); err != nil || len(m.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	var cfg struct {
		Config struct {
			User   string
			Labels map[string]string
		}
	}
	if err := json.Unmarshal(entries[blobPath(m.Config.Digest)], &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != img.User || cfg.Config.Labels["org.opencontainers.image.version"] != "1" {
		t.Fatalf("config %+v", cfg)
	}
	if mode, ok := fileMode(t, entries[blobPath(m.Layers[0].Digest)], "usr/bin/tool"); !ok || mode != 0o755 {
		t.Fatal("layer lacks usr/bin/tool with mode 0755")
	}
}

// writeTwice writes img into two archives in dir and returns the archive,
// failing the test if the two differ.
func writeTwice(t *testing.T, dir string, img Image) []byte {
	t.Helper()
	var out [2][]byte
	for i, name := range []string{"a.tar", "b.tar"} {
		p := filepath.Join(dir, name)
		if _, err := Write(p, img); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	if !bytes.Equal(out[0], out[1]) {
		t.Fatal("two writes of one image differ")
	}
	return out[0]
}

// fileMode is the mode of the last entry named name in the tar archive
// layer, if there is one.
func fileMode(t *testing.T, layer []byte, name string) (mode int64, ok bool) {
	t.Helper()
	r := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return mode, ok
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			mode, ok = h.Mode, true
		}
	}
}

func TestWriteRejectsRelativePaths(t *testing.T) {
	_, err := Write(filepath.Join(t.TempDir(), "x.tar"), Image{Name: "x:1", Files: Files{"usr/bin/x": "/dev/null"}})
	if err == nil || !strings.Contains(err.Error(), "not absolute") {
		t.Fatalf("err = %v", err)
	}
}

func blobPath(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }

func untar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		c, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = c
	}
}

// TestDirChain: a directory's chain lists it and its parents, outermost
// first; the root and relative "." make none.
func TestDirChain(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"/", nil},
		{".", nil},
		{"/tmp", []string{"/tmp"}},
		{"/usr/local/bin", []string{"/usr", "/usr/local", "/usr/local/bin"}},
		{"/usr//lib/../bin/", []string{"/usr", "/usr/bin"}},
	} {
		if got := dirChain(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("dirChain(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestDirMode: /tmp is world-writable and sticky, every other directory 0755.
func TestDirMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{{"/tmp", 0o1777}, {"/tmp/x", 0o755}, {"/usr", 0o755}, {"/var/tmp", 0o755}} {
		if got := dirMode(tc.in); got != tc.want {
			t.Errorf("dirMode(%q) = %o, want %o", tc.in, got, tc.want)
		}
	}
}
