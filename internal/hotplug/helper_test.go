package hotplug

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

const helperEnv = "GPUSLICE_HOTPLUG_HELPER_ROOT"

func TestMain(m *testing.M) {
	if root := os.Getenv(helperEnv); root != "" {
		if err := runHelper(root); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runHelper plays a container: a private mount namespace, a root of its own
// with a tmpfs /dev, then answers "open PATH" / "stat PATH" lines with what
// the kernel said ("open" is read-write, "read" and "write" one of them).
func runHelper(root string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", filepath.Join(root, "dev"), "tmpfs", 0, "mode=755"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	if err := unix.Chroot(root); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		verb, path, _ := strings.Cut(sc.Text(), " ")
		fmt.Println(helperDo(verb, path))
	}
	return sc.Err()
}

func helperDo(verb, path string) string {
	flags := map[string]int{"open": unix.O_RDWR, "read": unix.O_RDONLY, "write": unix.O_WRONLY}
	switch verb {
	case "open", "read", "write":
		fd, err := unix.Open(path, flags[verb]|unix.O_CLOEXEC, 0)
		if err != nil {
			return errnoName(err)
		}
		_ = unix.Close(fd)
		return "ok"
	case "stat":
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			return errnoName(err)
		}
		return fmt.Sprintf("%#o %d:%d", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	return "bad verb"
}

// helper is a running "container" process.
type helper struct {
	t    testing.TB
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	root string
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates cgroups, device nodes and mount namespaces")
	}
}

func startHelper(t testing.TB) *helper {
	t.Helper()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out), root: root}
	t.Cleanup(func() {
		_ = in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper: %v", err)
		}
	})
	if !h.out.Scan() || h.out.Text() != "ready" {
		t.Fatalf("helper did not start: %q %v", h.out.Text(), h.out.Err())
	}
	return h
}

func (h *helper) ask(verb, path string) string {
	h.t.Helper()
	if _, err := fmt.Fprintf(h.in, "%s %s\n", verb, path); err != nil {
		h.t.Fatal(err)
	}
	if !h.out.Scan() {
		h.t.Fatalf("helper gone: %v", h.out.Err())
	}
	return h.out.Text()
}

// expectOpen checks what opening each path gives inside the container.
func (h *helper) expectOpen(want map[string]string) {
	h.t.Helper()
	for p, w := range want {
		if got := h.ask("open", p); got != w {
			h.t.Errorf("open %s inside the container = %s, want %s", p, got, w)
		}
	}
}

// newCgroup makes a child cgroup under dir and moves pid into it; it is
// removed when the test ends (after the helper exited).
func newCgroup(t testing.TB, parent string, pid int) string {
	t.Helper()
	dir := filepath.Join(parent, fmt.Sprintf("gpuslice-hotplug-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_")))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Cleanups run last-registered first: the helper still lives in
		// the cgroup here, so move it back to the parent before removing.
		moveAll(t, dir, parent)
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("remove cgroup: %v", err)
		}
	})
	if err := cgroups.WriteFile(dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		t.Fatal(err)
	}
	return dir
}

func moveAll(t testing.TB, from, to string) {
	b, err := os.ReadFile(filepath.Join(from, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, p := range strings.Fields(string(b)) {
		if err := cgroups.WriteFile(to, "cgroup.procs", p); err != nil {
			t.Logf("move %s out: %v", p, err)
		}
	}
}

// errnoName names the errno an open or stat failed with.
func errnoName(err error) string {
	var en unix.Errno
	if errors.As(err, &en) {
		return unix.ErrnoName(en)
	}
	return err.Error()
}
