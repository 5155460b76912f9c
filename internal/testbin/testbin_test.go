package testbin

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDir(t *testing.T) {
	t.Setenv("GPUSLICE_BIN", "")
	want, err := filepath.Abs(filepath.Join("..", "..", "bin"))
	if err != nil {
		t.Fatal(err)
	}
	if got := Dir(t); got != want {
		t.Errorf("Dir = %q, want %q (the module's bin/)", got, want)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tool"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GPUSLICE_BIN", dir)
	if got := Dir(t, "tool"); got != dir {
		t.Errorf("Dir with $GPUSLICE_BIN = %q, want %q", got, dir)
	}
}
