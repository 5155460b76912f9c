package group

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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

// WriteFile (the daemon's write-backs and read-back files, as root, in group
// directories their owners write) sets its file's mode through the
// descriptor: a link the directory's owner puts at the temporary file's name
// the moment it appears never has its target's mode changed (it was chmod by
// name: 0644 on any file of the host, /etc/shadow included).
func TestWriteFileModeNotThroughLink(t *testing.T) {
	tree := NewTree(t.TempDir())
	if err := tree.Create("g"); err != nil {
		t.Fatal(err)
	}
	dir := tree.Path("g")
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE); err != nil {
		t.Fatal(err)
	}
	swapped := make(chan int)
	go func() { swapped <- swapTempForLink(fd, dir, secret) }() // the directory's owner
	failed := 0
	for range 300 {
		if tree.WriteFile("g", FileSlice, "7ms\n") != nil { // the owner moved its file away: its own group's loss
			failed++
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644); err != nil { // ends the owner's reads
		t.Fatal(err)
	}
	t.Logf("temporary files swapped for a link: %d (writes failed: %d)", <-swapped, failed)
	if err := unix.Close(fd); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(secret); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the link's target is now %v (%v), want -rw-------", st.Mode(), err)
	}
}

// swapTempForLink replaces each temporary file created in dir (inotify fd)
// by a link to target, at once, until a file named stop appears; it returns
// how many it replaced.
func swapTempForLink(fd int, dir, target string) int {
	n := 0
	buf := make([]byte, 4096)
	for {
		r, err := unix.Read(fd, buf)
		if err != nil || r <= 0 {
			return n
		}
		for off := 0; off+unix.SizeofInotifyEvent <= r; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			off += unix.SizeofInotifyEvent + int(ev.Len)
			p := filepath.Join(dir, name)
			if name == "stop" {
				return n
			}
			if st, err := os.Lstat(p); err != nil || !st.Mode().IsRegular() || !strings.HasPrefix(name, ".") {
				continue // gone already, or a link of ours
			}
			if os.Rename(p, p+".moved") == nil && os.Symlink(target, p) == nil {
				n++
			}
		}
	}
}
