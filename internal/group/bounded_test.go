package group

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A setting file over MaxFileSize is refused without reading it whole, and
// the error quotes nothing of it.
func TestReadTooLarge(t *testing.T) {
	tree := NewTree(t.TempDir())
	if err := tree.Create("g"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree.Path("g"), FileSlice), []byte(strings.Repeat("9", 8<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := tree.Read("g")
	if !errors.Is(err, ErrTooLarge) || len(err.Error()) > 300 {
		t.Fatalf("Read: %v", err)
	}
	if _, err := tree.ReadFile("g", FileSlice); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ReadFile: %v", err)
	}
}

// Values longer than MaxValueLen are refused before parsing; errors quote a
// short prefix of a bad value, never all of it.
func TestApplyBoundedQuote(t *testing.T) {
	for _, f := range SettingFiles() {
		for _, v := range []string{strings.Repeat("7", MaxFileSize), strings.Repeat("é", 40), "20ms\nhigh"} {
			var s Settings
			err := s.Apply(f, v)
			if !errors.Is(err, ErrInvalid) || len(err.Error()) > 200 {
				t.Errorf("Apply(%s, %d bytes): %v", f, len(v), err)
			}
		}
	}
	if q := Quote(strings.Repeat("x", 1000)); len(q) > 60 || !strings.Contains(q, "(1000 bytes)") {
		t.Errorf("Quote: %s", q)
	}
	if q := Quote("soon"); q != `"soon"` {
		t.Errorf("Quote: %s", q)
	}
}

// A file in a group directory that is a FIFO, a symbolic link (to a file the
// reader may read and the writer may not) or a directory is refused at once:
// the daemon reads the tree as root, and a group directory may belong to a
// user or be mounted into a container.
func TestReadNotRegular(t *testing.T) {
	tree := NewTree(t.TempDir())
	if err := tree.Create("g"); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("high\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := tree.Path("g")
	for _, tc := range []struct {
		file string
		make func(path string) error
	}{
		{FileSlice, func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{FileCgroup, func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{FilePriority, func(p string) error { return os.Symlink(secret, p) }},
		{FileShare, func(p string) error { return os.Mkdir(p, 0o755) }},
	} {
		path := filepath.Join(dir, tc.file)
		if err := tc.make(path); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := tree.ReadFile("g", tc.file)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s: ReadFile: %v, want ErrNotRegular", tc.file, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: ReadFile still blocked after 10 s (then: %v)", tc.file, unblockFIFO(path, done))
		}
		if err := os.RemoveAll(path); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(secret, filepath.Join(dir, FilePriority)); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Read("g"); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Read through a link: %v", err)
	}
	if s := tree.ReadValid("g"); s != (Settings{}) {
		t.Errorf("ReadValid through a link: %+v", s)
	}
	if b := tree.Cgroup("g"); b != "" {
		t.Errorf("Cgroup: %q", b)
	}
}

// unblockFIFO opens path for writing until the reader blocked in its open
// returns (a FIFO's open waits for a writer), and returns what it returned.
func unblockFIFO(path string, done <-chan error) error {
	for {
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close() //nolint:errcheck // only wakes the reader
		}
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}
