//go:build timeslicee2e

package timeslicee2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/groupstate/groupstatetest"
	"github.com/gpuslice/gpuslice/internal/identity"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// TestReliabilityTreeNotRegular: a group directory's owner (a user it was
// delegated to, the container it is mounted into) puts a FIFO in place of a
// setting file and of the cgroup binding, and a link to a root-only file in
// place of another: the daemon, root, still comes up and identifies callers
// (it waited forever in the FIFO's open), never reads nor logs the linked
// file, and writes valid settings back in their place. Making a group's state
// file (the node agent, root) never goes through a link either.
func TestReliabilityTreeNotRegular(t *testing.T) {
	cfg := testCfg(t)
	tree := group.NewTree(cfg.RunDir)
	setGroup(t, cfg, "fifo", group.Change{File: group.FileSlice, Value: "7ms"})
	setGroup(t, cfg, "link")
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("s3cr3t:not-for-any-log\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifos := []string{filepath.Join(tree.Path("fifo"), group.FileSlice), filepath.Join(tree.Path("fifo"), group.FileCgroup)}
	for _, p := range fifos {
		if err := errors.Join(os.RemoveAll(p), syscall.Mkfifo(p, 0o644)); err != nil {
			t.Fatal(err)
		}
	}
	linked := filepath.Join(tree.Path("link"), group.FilePriority)
	if err := errors.Join(os.Remove(linked), os.Symlink(secret, linked)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs strings.Builder
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + args + "\n")
	}, funcr.Options{Verbosity: 10})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- timeslice.Run(ctx, cfg) }()
	defer func() {
		cancel()
		for stuck := true; stuck; { // a daemon blocked in a FIFO's open waits for a writer
			for _, p := range fifos {
				if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					_ = f.Close() //nolint:errcheck // only wakes the reader
				}
			}
			select {
			case err := <-done:
				stuck = false
				if err != nil {
					t.Error(err)
				}
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); !client.Reachable(context.Background(), cfg.Socket); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not come up")
		}
	}
	// A client is identified (every group's cgroup binding read) and served.
	if l := startChild(t, cfg, "dial", "").expect(t, "dial", 10*time.Second); !strings.HasPrefix(l, "dial ok pid-") {
		t.Errorf("a client: %q, want dial ok pid-...", l)
	}
	// The tree was read before the socket was made: the write-backs are done.
	for _, f := range []struct{ path, want string }{{fifos[0], "default"}, {linked, "low"}} {
		st, err := os.Lstat(f.path)
		if err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s was not replaced by a regular file: %v %v", f.path, st.Mode(), err)
			continue
		}
		if v, err := tree.ReadFile(filepath.Base(filepath.Dir(f.path)), filepath.Base(f.path)); err != nil || v != f.want {
			t.Errorf("%s: %q %v, want %q", f.path, v, err, f.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "s3cr3t") {
		t.Errorf("the daemon logged the linked file's content:\n%s", logs.String())
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "s3cr3t:not-for-any-log\n" {
		t.Errorf("the linked file changed: %q %v", b, err)
	}
}

// TestReliabilityGroupStateNoLink: the node agent (root) making a container's
// group state file in a directory the container writes neither creates nor
// changes the file a link there points to.
func TestReliabilityGroupStateNoLink(t *testing.T) {
	dir := t.TempDir()
	path := groupstate.Path(dir, "k8s-x")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "cron-job")
	if err := os.Symlink(outside, path); err != nil {
		t.Fatal(err)
	}
	if err := groupstate.Create("/proc", path, "k8s-x"); !errors.Is(err, group.ErrNotRegular) {
		t.Errorf("groupstate.Create through a dangling link: %v", err)
	}
	if _, err := os.Lstat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link's target was created: %v", err)
	}
	if err := os.WriteFile(outside, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := groupstate.Create("/proc", path, "k8s-x"); !errors.Is(err, group.ErrNotRegular) {
		t.Errorf("groupstate.Create through a link: %v", err)
	}
	if st, err := os.Stat(outside); err != nil || st.Size() != 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("the link's target changed: %v %v", st.Mode(), err)
	}
	if _, err := groupstate.SetLimit(path, 1<<30, groupstate.LockWait); !errors.Is(err, group.ErrNotRegular) {
		t.Errorf("groupstate.SetLimit through a link: %v", err)
	}
}

// TestReliabilityStateLockHeld: a member that holds its group state file's
// lock for ever (the file is mapped by every member; a container may lock it)
// stops neither the daemon's start, its status refresh, the release of
// another group's dead member's memory, nor other groups' settings (each
// waited for the lock for ever); the locked group's new memory.max is applied
// once the lock is let go; its members are listed meanwhile.
func TestReliabilityStateLockHeld(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "hog") // before "reap": the refresh takes the groups in order
	setGroup(t, cfg, "reap")
	hog, reap := groupstate.Path(cfg.RunDir, "hog"), groupstate.Path(cfg.RunDir, "reap")
	for _, p := range []string{hog, reap} {
		if err := groupstate.Create("/proc", p, filepath.Base(filepath.Dir(p))); err != nil {
			t.Fatal(err)
		}
	}
	start, ns := selfIdentity(t)
	groupstatetest.AddMember(t, reap, 0, int32(os.Getpid()), start, ns, 4096)
	groupstatetest.AddMember(t, reap, 1, groupstatetest.DeadPID(t), start, ns, 1<<30)
	groupstatetest.AddMember(t, hog, 0, int32(os.Getpid()), start, ns, 4096)
	f, err := os.OpenFile(hog, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unlock := func() { once.Do(func() { _ = f.Close() }) } //nolint:errcheck // closing drops the lock
	t.Cleanup(unlock)
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_WRLCK}); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, cfg)
	t.Cleanup(unlock) // before the daemon stops: one waiting for the lock gets it
	tree := group.NewTree(cfg.RunDir)
	waitFile := func(grp, file, want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if v, _ := tree.ReadFile(grp, file); v == want {
				return
			}
			if time.Now().After(deadline) {
				v, err := tree.ReadFile(grp, file)
				t.Fatalf("%s's %s = %q (%v), want %q", grp, file, v, err, want)
			}
		}
	}
	waitFile("reap", group.FileMemoryCurrent, "4096")
	setGroup(t, cfg, "hog", group.Change{File: group.FileMemoryMax, Value: "1GiB"})
	setGroup(t, cfg, "reap", group.Change{File: group.FileMemoryMax, Value: "2GiB"})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if lim, _, _ := groupstate.HeaderLimit(reap); lim == 2<<30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("reap's memory.max was not applied while hog's state file is locked")
		}
	}
	waitStatusSince(t, cfg, time.Now())
	if _, err := groupstate.SetLimit(hog, 3<<30, groupstate.LockWait); !errors.Is(err, groupstate.ErrLocked) {
		t.Errorf("groupstate.SetLimit on a locked state file: %v, want groupstate.ErrLocked", err)
	}
	// Listing members needs no lock (the node agent's publisher, group rm).
	if ps, err := groupstate.Processes(hog); err != nil || len(ps) != 1 || ps[0].PID != int32(os.Getpid()) {
		t.Errorf("groupstate.Processes of a locked state file: %+v %v, want this process", ps, err)
	}
	if n, err := identity.LiveMembers("/proc", hog); err != nil || n != 1 {
		t.Errorf("LiveMembers of a locked state file: %d %v, want 1", n, err)
	}
	unlock()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if lim, set, _ := groupstate.HeaderLimit(hog); set && lim == 1<<30 {
			break
		}
		if time.Now().After(deadline) {
			lim, set, err := groupstate.HeaderLimit(hog)
			t.Fatalf("hog's limit %d (set %v, %v) after the lock was let go, want 1 GiB", lim, set, err)
		}
	}
}

// TestReliabilityRunDirOtherUser: a daemon does not serve from a run
// directory another user made (the /tmp fallback made first by someone else,
// who could then swap its socket and group files) or one others may write.
func TestReliabilityRunDirOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a directory owned by another user")
	}
	for _, tc := range []struct {
		name string
		mode os.FileMode
		uid  int
	}{{"another user's", 0o755, nobody}, {"writable by all", 0o777, 0}} {
		cfg := testCfg(t)
		if err := errors.Join(os.Chmod(cfg.RunDir, tc.mode), os.Chown(cfg.RunDir, tc.uid, tc.uid)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := timeslice.Run(ctx, cfg)
		cancel()
		if !errors.Is(err, paths.ErrUnsafeRunDir) {
			t.Errorf("%s run directory: Run returned %v, want ErrUnsafeRunDir", tc.name, err)
		}
		if _, err := os.Lstat(cfg.Socket); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s run directory: a socket was made (%v)", tc.name, err)
		}
	}
}

// mapStateChild maps file (shared, as the library maps a group's state) and
// holds it.
func mapStateChild(file string) error {
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	b, err := unix.Mmap(int(f.Fd()), 0, groupstate.FileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	fmt.Println("mapped")
	time.Sleep(time.Hour)
	return unix.Munmap(b)
}

// TestReliabilityAdoptOnlyOwnState: a user's process started with another
// user's group file named in its environment (its own choice) and mapping a
// state file of its own is no member of that group: preparing the group (a
// `gpuslice run --group` of root, its state file missing) does not take that
// file as the group's state (it was linked in place: the user then wrote the
// root group's limits and counts), nor refuses to make one.
func TestReliabilityAdoptOnlyOwnState(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs a process as another user")
	}
	cfg := testCfg(t)
	openToAll(t, cfg)
	mine := filepath.Join(cfg.RunDir, "nobody")
	if err := os.Mkdir(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(mine, groupstate.FileName)
	if err := errors.Join(groupstate.Create("/proc", own, "own"), os.Chown(own, nobody, nobody), os.Chown(mine, nobody, nobody)); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(cfg.RunDir, "run")
	file := groupstate.Path(runDir, "g")
	startChildAs(t, cfg, nobody, "map-state", "GS_MAP="+own, "GPUSLICE_GROUP_FILE="+file).expect(t, "mapped", 10*time.Second)
	// As `gpuslice run --group g` prepares it (the daemon of cfg does not serve runDir: not waited for).
	err := groupmgr.New(groupmgr.Config{RunDir: runDir}).Create(context.Background(), "g",
		groupmgr.Resources{Settings: group.Settings{MemoryMax: 1 << 30}}, groupmgr.CreateOptions{Adopt: true, NoWait: true})
	if err != nil {
		t.Fatalf("preparing the group beside another user's process naming it: %v", err)
	}
	var a, b unix.Stat_t
	if err := errors.Join(unix.Stat(file, &a), unix.Stat(own, &b)); err != nil {
		t.Fatal(err)
	}
	if a.Ino == b.Ino || a.Uid != 0 {
		t.Fatalf("the group's state file is another user's (uid %d, the same file: %v)", a.Uid, a.Ino == b.Ino)
	}
}

// TestReliabilityTreeDirectoryForFile: a directory made where a group's
// setting file belongs (empty: IN_CREATE), or one with a file in it moved
// there, is reported and repaired like a bad value: the daemon puts the last
// valid setting back in its place, and the group reads again (`group get`,
// `group ls`). Before, the write-back's rename failed on the directory and
// nothing noticed its making: the group stayed unreadable (issue 38). A group
// per case: the file is removed before the directory takes its place, and a
// read in between (the daemon's own write-back of a previous repair) reads
// it as its default.
func TestReliabilityTreeDirectoryForFile(t *testing.T) {
	cfg := testCfg(t)
	tree := group.NewTree(cfg.RunDir)
	cases := []struct {
		g, f  string
		moved bool
	}{{"made-slice", group.FileSlice, false}, {"made-priority", group.FilePriority, false},
		{"moved-slice", group.FileSlice, true}, {"moved-priority", group.FilePriority, true}}
	for _, c := range cases {
		setGroup(t, cfg, c.g, group.Change{File: group.FileSlice, Value: "7ms"})
	}
	startDaemon(t, cfg)
	for _, c := range cases {
		p := filepath.Join(tree.Path(c.g), c.f)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if !c.moved {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		} else {
			// Filled beside it (a name starting with a dot, which the watcher
			// ignores), then moved in: a file written into a directory made
			// in place races the daemon's repair of it.
			stage := filepath.Join(tree.Path(c.g), "."+c.f+".dir")
			if err := errors.Join(os.Mkdir(stage, 0o755), os.WriteFile(filepath.Join(stage, "x"), []byte("7ms\n"), 0o644),
				os.Rename(stage, p)); err != nil {
				t.Fatal(err)
			}
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			// Repaired: a regular file in its place (a missing one reads as
			// the default for a moment while the directory is moved aside).
			fi, ferr := os.Lstat(p)
			st, err := tree.Read(c.g)
			if ferr == nil && fi.Mode().IsRegular() && err == nil {
				if st.Slice != 7*time.Millisecond {
					t.Fatalf("after %s of %s was a directory, the group reads %+v, want its slice of 7ms", c.f, c.g, st)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a directory where %s of %s belongs was not repaired: %v %v %v", c.f, c.g, fi, ferr, err)
			}
		}
		names, err := os.ReadDir(tree.Path(c.g))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range names { // the directory moved aside, or the test's own (not the daemon's files in flight)
			if strings.HasPrefix(e.Name(), "."+c.f+".dir") {
				t.Errorf("left behind in the directory of %s: %s", c.g, e.Name())
			}
		}
	}
}
