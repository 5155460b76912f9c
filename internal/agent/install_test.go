package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// TestInstallLibrary: the copy lands at dst with mode 0755; a second install
// replaces it by rename, so a reader holding the first copy keeps its bytes.
func TestInstallLibrary(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src.so"), filepath.Join(dir, "host", "lib", "libgpuslice.so")
	if err := os.WriteFile(src, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := InstallLibrary(src, dst); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := os.WriteFile(src, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := InstallLibrary(src, dst); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dst)
	if err != nil || string(b) != "two" {
		t.Fatalf("installed %q, %v", b, err)
	}
	old := make([]byte, 3)
	if _, err := held.ReadAt(old, 0); err != nil || string(old) != "one" {
		t.Fatalf("the held copy reads %q, %v", old, err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	entries, err := os.ReadDir(filepath.Dir(dst))
	if err != nil || len(entries) != 1 {
		t.Fatalf("library directory holds %v, %v (a temporary file left?)", entries, err)
	}
	if err := InstallLibrary(filepath.Join(dir, "missing.so"), dst); err == nil {
		t.Fatal("missing source installed")
	}
}

// TestWritePreloadList: the list names the library's container path, one
// line, readable by every user (the container's loader may run as any
// uid), replaced by rename; no library, no list.
func TestWritePreloadList(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{NodeValues: NodeValues{Library: "/var/lib/gpuslice/libgpuslice.so", RunDir: filepath.Join(dir, "run")}}
	path := PreloadListPath(cfg)
	for range 2 {
		if err := WritePreloadList(path, cfg.Library); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "/usr/local/gpuslice/lib/libgpuslice.so\n" {
		t.Fatalf("preload list %q, %v", b, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	if entries, err := os.ReadDir(cfg.RunDir); err != nil || len(entries) != 1 {
		t.Fatalf("run directory holds %v, %v (a temporary file left?)", entries, err)
	}
	if p := PreloadListPath(Config{NodeValues: NodeValues{RunDir: cfg.RunDir}}); p != "" {
		t.Fatalf("no library, preload list %q", p)
	}
	if err := WritePreloadList("", cfg.Library); err != nil {
		t.Fatal(err)
	}
}
