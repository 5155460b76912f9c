package nodestatus

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/group"
)

func TestSocketPath(t *testing.T) {
	env := map[string]string{"GPUSLICE_RUN_DIR": "/tmp/rd"}
	getenv := func(k string) string { return env[k] }
	if got := SocketPath(getenv); got != "/tmp/rd/node.sock" {
		t.Fatalf("socket %q, want the run directory's node.sock", got)
	}
	env[EnvSocket] = "/x/s.sock"
	if got := SocketPath(getenv); got != "/x/s.sock" {
		t.Fatalf("socket %q, want $%s", got, EnvSocket)
	}
}

// Read takes the status of this version and refuses another, or none.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(dir); err == nil {
		t.Fatal("read a status that is not there")
	}
	write := func(st Status) {
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "status.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(Status{Version: Version, PID: 42, Features: []string{FeatureGenerations},
		GPUs: []GPUStatus{{UUID: "GPU-a", Groups: []GroupGPUStatus{{Group: "g", Share: 0.25}}}}})
	st, err := Read(dir)
	if err != nil || st.PID != 42 || len(st.GPUs) != 1 || st.GPUs[0].Groups[0].Share != 0.25 {
		t.Fatalf("read %+v %v", st, err)
	}
	write(Status{Version: Version + 1})
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "status version") {
		t.Fatalf("another version: %v", err)
	}
	if err := os.WriteFile(Path(dir), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir); err == nil {
		t.Fatal("read a truncated status")
	}
}

// Read refuses, without waiting or reading more than MaxBytes, a status that
// is too large, a link (to a valid status too) or a FIFO.
func TestReadBounded(t *testing.T) {
	dir := t.TempDir()
	valid := filepath.Join(dir, "valid.json")
	b, err := json.Marshal(Status{Version: Version})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(valid, b, 0o644); err != nil {
		t.Fatal(err)
	}
	big := append(b, make([]byte, MaxBytes)...) // valid JSON, then past the bound
	for i := len(b); i < len(big); i++ {
		big[i] = ' '
	}
	cases := map[string]struct {
		make func(path string) error
		want error
	}{
		"too large": {func(p string) error { return os.WriteFile(p, big, 0o644) }, ErrTooLarge},
		"link":      {func(p string) error { return os.Symlink(valid, p) }, group.ErrNotRegular},
		"fifo":      {func(p string) error { return syscall.Mkfifo(p, 0o644) }, group.ErrNotRegular},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if err := os.Remove(Path(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			if err := c.make(Path(dir)); err != nil {
				t.Fatal(err)
			}
			if st, err := Read(dir); !errors.Is(err, c.want) {
				t.Fatalf("read %+v %v, want %v", st, err, c.want)
			}
		})
	}
}
