package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
	"github.com/gpuslice/gpuslice/internal/timeslice/timeslicetest"
)

// The test binary doubles as the gpuslice CLI PrepareRun starts: run as
// "<test binary> node ..." it is a time-slice daemon.
func TestMain(m *testing.M) { timeslicetest.Main(m) }

// PrepareRun validates the run flags (changing nothing on error), writes the
// group's settings, and starts a daemon that the run can reach.
func TestPrepareRun(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "node.sock")
	getenv := func(k string) string {
		return map[string]string{"GPUSLICE_RUN_DIR": dir, nodestatus.EnvSocket: socket}[k]
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopDaemon(t, dir) })
	bad := RunSetup{Group: "job", Flags: group.RunFlags{Slice: "20ms", Share: "30%"}}
	if _, err := PrepareRun(context.Background(), getenv, bad); !errors.Is(err, group.ErrInvalid) {
		t.Fatalf("slice and share together: %v", err)
	}
	if group.NewTree(dir).Exists("job") {
		t.Fatal("a refused run created its group")
	}
	env, err := PrepareRun(context.Background(), getenv, RunSetup{Group: "job", MemoryMax: 1 << 30,
		Flags: group.RunFlags{Slice: "20ms", ShareMax: "40%", Priority: "high"}, Start: client.StartOptions{Exe: exe}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(env, []string{nodestatus.EnvSocket + "=" + socket}) {
		t.Fatalf("env %q", env)
	}
	if !client.Reachable(context.Background(), socket) {
		t.Fatal("no daemon answers after PrepareRun")
	}
	s, err := group.NewTree(dir).Read("job")
	if err != nil || s.Slice != 20*time.Millisecond || s.MemoryMax != 1<<30 || s.Priority.String() != "high" ||
		s.ShareMax != 0.4 {
		t.Fatalf("group settings %+v %v", s, err)
	}
}

// stopDaemon stops the daemon that PrepareRun started in runDir (once its
// status file names it) and waits until it has exited, so that nothing of it
// writes into the test's directory any more.
func stopDaemon(t *testing.T, runDir string) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := nodestatus.Read(runDir)
		if err == nil && st.PID > 0 {
			if err := client.StopPID(st.PID, unix.SIGTERM, 30*time.Second); err != nil {
				t.Error(err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("no daemon status in %s: %v", runDir, err)
			return
		}
	}
}

// A run directory another user may control (made first by someone else, a
// link by its name, writable by others: the /tmp fallback's squatting) is
// refused, and nothing is written into it.
func TestPrepareRunUnsafeRunDir(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	open := filepath.Join(base, "open")
	if err := errors.Join(os.Symlink(real, link), os.Mkdir(open, 0o755), os.Chmod(open, 0o777)); err != nil {
		t.Fatal(err)
	}
	dirs := []string{link, open}
	if os.Geteuid() == 0 { // a directory another user made
		other := filepath.Join(base, "other")
		if err := errors.Join(os.Mkdir(other, 0o755), os.Chown(other, 65534, 65534)); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, other)
	} else {
		t.Log("not root: the directory of another user is not tried")
	}
	for _, dir := range dirs {
		getenv := func(k string) string { return map[string]string{"GPUSLICE_RUN_DIR": dir}[k] }
		_, err := PrepareRun(context.Background(), getenv, RunSetup{Group: "job", NoDaemon: true})
		if !errors.Is(err, paths.ErrUnsafeRunDir) {
			t.Errorf("run directory %s: %v, want ErrUnsafeRunDir", dir, err)
		}
		if group.NewTree(dir).Exists("job") {
			t.Errorf("run directory %s: the group was made", dir)
		}
	}
}

// A run in a named group that exists sets the files its flags name, as its
// request translates them, and leaves the others as they are; elastic memory
// over a smaller plain limit applies in an order every step of which is valid.
func TestRunChangesOverANamedGroup(t *testing.T) {
	tree := group.NewTree(t.TempDir())
	if err := tree.Create("g"); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Set("g", []group.Change{{File: group.FileShare, Value: "30%"}, {File: group.FileMemoryMax, Value: "1GiB"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup RunSetup
		want  group.Settings
	}{
		{"no flags", RunSetup{}, group.Settings{Share: 0.3, MemoryMax: 1 << 30}},
		{"priority only", RunSetup{Flags: group.RunFlags{Priority: "high"}}, group.Settings{Share: 0.3, MemoryMax: 1 << 30, Priority: policy.High}},
		{"a slice replaces the share", RunSetup{Flags: group.RunFlags{Slice: "5ms"}}, group.Settings{Slice: 5 * time.Millisecond, MemoryMax: 1 << 30}},
		{"elastic over a smaller limit", RunSetup{MemoryMax: 6 << 30, Elastic: ElasticSetup{Max: 20 << 30, Spill: true}},
			group.Settings{Share: 0.3, MemoryMin: 6 << 30, MemoryMax: 20 << 30, MemorySpill: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changes, err := tc.setup.changes()
			if err != nil {
				t.Fatal(err)
			}
			got, err := settingsAfter(tree, "g", changes)
			if err != nil || got != tc.want {
				t.Fatalf("%+v %v, want %+v (changes %v)", got, err, tc.want, changes)
			}
		})
	}
	// An elastic group run again with a plain limit loses its guarantee.
	elastic := RunSetup{MemoryMax: 6 << 30, Elastic: ElasticSetup{Max: 20 << 30}}
	changes, err := elastic.changes()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Set("g", changes); err != nil {
		t.Fatal(err)
	}
	changes, err = RunSetup{MemoryMax: 2 << 30}.changes()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := settingsAfter(tree, "g", changes); err != nil || got != (group.Settings{Share: 0.3, MemoryMax: 2 << 30}) {
		t.Fatalf("plain limit after elastic: %+v %v", got, err)
	}
}
