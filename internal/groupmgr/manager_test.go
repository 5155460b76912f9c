package groupmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/timeslice/timeslicetest"
)

// startDaemon runs a time-slice daemon on runDir (one made-up GPU) until the test ends.
func startDaemon(t testing.TB, runDir string) { t.Helper(); timeslicetest.Start(t, runDir) }

func limitOf(t *testing.T, runDir, name string) uint64 {
	t.Helper()
	lim, set, err := groupstate.HeaderLimit(groupstate.Path(runDir, name))
	if err != nil || !set {
		t.Fatalf("group %s: header limit %d set %v: %v", name, lim, set, err)
	}
	return lim
}

// Create and Set return once the daemon has applied the settings: the
// group's limit is in its state file's header then (written by the daemon
// alone), and the daemon's acknowledged generation is the manager's.
func TestCreateSetAppliedByDaemon(t *testing.T) {
	dir := t.TempDir()
	startDaemon(t, dir)
	m := New(Config{RunDir: dir})
	ctx := context.Background()
	r := Resources{Settings: group.Settings{MemoryMax: 1 << 30, Share: 0.3}}
	for _, o := range []CreateOptions{{}, {Container: true, GateOff: true}} {
		name := map[bool]string{false: "run", true: "ctr"}[o.Container]
		if err := m.Create(ctx, name, r, o); err != nil {
			t.Fatal(err)
		}
		if lim := limitOf(t, dir, name); lim != 1<<30 {
			t.Fatalf("%s: limit %d after Create, want 1 GiB", name, lim)
		}
		want, _ := m.Tree().Generation(name)
		if g, err := m.Tree().Applied(name); err != nil || g != want || g == 0 {
			t.Fatalf("%s: applied generation %d %v, want %d", name, g, err, want)
		}
	}
	if v, err := m.Tree().ReadFile("ctr", group.FileGateOff); err != nil || v != "off" {
		t.Fatalf("gate-off: %q %v", v, err)
	}
	r.MemoryMax, r.Priority = 2<<30, 1
	if err := m.Set(ctx, "run", r); err != nil {
		t.Fatal(err)
	}
	if lim := limitOf(t, dir, "run"); lim != 2<<30 {
		t.Fatalf("limit %d after Set, want 2 GiB", lim)
	}
	// The same settings again: a new generation, applied too.
	if err := m.Set(ctx, "run", r); err != nil {
		t.Fatal(err)
	}
	// Elastic: the header holds the guarantee (what a slot starts with).
	r.MemoryMin, r.MemoryMax = 1<<30, 4<<30
	if err := m.Set(ctx, "run", r); err != nil {
		t.Fatal(err)
	}
	if lim := limitOf(t, dir, "run"); lim != 1<<30 {
		t.Fatalf("elastic group: header limit %d, want the 1 GiB guarantee", lim)
	}
	got, err := m.Get("run")
	if err != nil || got.Settings != r.Settings || got.GPUs != nil {
		t.Fatalf("Get: %+v %v, want %+v", got, err, r)
	}
	if err := m.Set(ctx, "missing", r); err == nil {
		t.Fatal("Set of a missing group succeeded")
	}
	bad := Resources{Settings: group.Settings{MemoryMin: 2, MemoryMax: 1}}
	if err := m.Create(ctx, "bad", bad, CreateOptions{}); !errors.Is(err, group.ErrInvalid) || m.Tree().Exists("bad") {
		t.Fatalf("invalid settings: %v (group made: %v)", err, m.Tree().Exists("bad"))
	}
	if err := m.Remove(ctx, "run"); err != nil || m.Tree().Exists("run") {
		t.Fatalf("Remove: %v", err)
	}
}

// A group's GPUs (hot add and remove of whole GPUs) go through the one Set
// path: written with the settings, numbered and applied by the daemon, read
// back sorted; nil leaves them as they are, empty removes them all; bad lists
// write nothing.
func TestGPUsThroughSet(t *testing.T) {
	dir := t.TempDir()
	startDaemon(t, dir)
	m := New(Config{RunDir: dir})
	ctx := context.Background()
	s := group.Settings{MemoryMax: 1 << 30}
	if err := m.Create(ctx, "ctr", Resources{Settings: s, GPUs: []string{"GPU-b"}}, CreateOptions{Container: true}); err != nil {
		t.Fatal(err)
	}
	gpus := func() []string {
		t.Helper()
		r, err := m.Get("ctr")
		if err != nil {
			t.Fatal(err)
		}
		return r.GPUs
	}
	if g := gpus(); !slices.Equal(g, []string{"GPU-b"}) {
		t.Fatalf("after Create: %q", g)
	}
	for i, tc := range []struct {
		set, want []string
	}{
		{set: []string{"GPU-c", "GPU-a", "GPU-b"}, want: []string{"GPU-a", "GPU-b", "GPU-c"}}, // hot add
		{set: nil, want: []string{"GPU-a", "GPU-b", "GPU-c"}},                                 // not said: kept
		{set: []string{"GPU-c"}, want: []string{"GPU-c"}},                                     // hot remove
		{set: []string{}, want: []string{}},                                                   // all removed
	} {
		before, _ := m.Tree().Generation("ctr")
		if err := m.Set(ctx, "ctr", Resources{Settings: s, GPUs: tc.set}); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if g := gpus(); !slices.Equal(g, tc.want) || g == nil {
			t.Fatalf("%d: GPUs %q after Set(%q), want %q", i, g, tc.set, tc.want)
		}
		if g, err := m.Tree().Generation("ctr"); err != nil || g != before+1 {
			t.Fatalf("%d: generation %d (%v), want %d: not through the one Set path", i, g, err, before+1)
		}
		// Only the GPUs changed: not waited for, yet the daemon acknowledges the generation.
		if err := m.wait(ctx, "ctr", before+1); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if a, err := m.Tree().Applied("ctr"); err != nil || a != before+1 {
			t.Fatalf("%d: applied generation %d (%v), want %d", i, a, err, before+1)
		}
	}
	if err := m.Set(ctx, "ctr", Resources{Settings: s, GPUs: []string{"GPU-a"}}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{"GPU-a", "GPU-a"}, {""}, {"GPU a"}, {"GPU-a\nGPU-b"}, {strings.Repeat("x", 97)},
		slices.Repeat([]string{"x"}, groupstate.MaxGPUs+1)} {
		if err := m.Set(ctx, "ctr", Resources{Settings: s, GPUs: bad}); !errors.Is(err, group.ErrInvalid) {
			t.Fatalf("GPUs %q: %v, want group.ErrInvalid", bad, err)
		}
		if g := gpus(); !slices.Equal(g, []string{"GPU-a"}) {
			t.Fatalf("a bad list %q changed the GPUs to %q", bad, g)
		}
	}
	// A group without the file (an older release's, or a caller that never said): nil.
	if err := m.Create(ctx, "run", Resources{Settings: s}, CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r, err := m.Get("run"); err != nil || r.GPUs != nil {
		t.Fatalf("GPUs of a group never given any: %q %v, want nil", r.GPUs, err)
	}
	// A file written by hand that is not a list: Get says so.
	if err := m.Tree().WriteFile("run", FileGPUs, "GPU-a\nGPU-a\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get("run"); !errors.Is(err, group.ErrInvalid) {
		t.Fatalf("Get of a bad gpus file: %v, want group.ErrInvalid", err)
	}
}

// Without a daemon a change fails after the timeout with a clear error; the
// settings are written, and a daemon started later applies them.
func TestNotAppliedWithoutDaemon(t *testing.T) {
	dir := t.TempDir()
	m := New(Config{RunDir: dir, Timeout: 100 * time.Millisecond})
	err := m.Create(context.Background(), "g", Resources{Settings: group.Settings{MemoryMax: 1 << 30}}, CreateOptions{})
	if !errors.Is(err, ErrNotApplied) || !strings.Contains(err.Error(), "time-slice daemon") {
		t.Fatalf("without a daemon: %v, want ErrNotApplied", err)
	}
	if _, set, err := groupstate.HeaderLimit(groupstate.Path(dir, "g")); err != nil || set {
		t.Fatalf("a limit in the header with no daemon: set %v %v", set, err)
	}
	startDaemon(t, dir)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if lim, set, _ := groupstate.HeaderLimit(groupstate.Path(dir, "g")); set && lim == 1<<30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon started later did not apply the written limit")
		}
	}
}

// BenchmarkApply: one Set round trip through the daemon (settings written,
// generation numbered, the daemon's inotify event, its apply and
// acknowledgement, the manager's poll), median and p99 over the run.
func BenchmarkApply(b *testing.B) {
	dir := b.TempDir()
	startDaemon(b, dir)
	m := New(Config{RunDir: dir})
	ctx := context.Background()
	r := Resources{Settings: group.Settings{MemoryMax: 1 << 30}}
	if err := m.Create(ctx, "g", r, CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		r.MemoryMax = uint64(1+i%2) << 30
		start := time.Now()
		if err := m.Set(ctx, "g", r); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-us")
}

// A live daemon of a release before generations (its status names no
// FeatureGenerations: a node mid-upgrade) applies settings without a word:
// the manager does not wait for it; a stale status (its pid gone) is no daemon.
func TestOlderDaemonNotWaitedFor(t *testing.T) {
	dir := t.TempDir()
	m := New(Config{RunDir: dir, Timeout: 100 * time.Millisecond})
	write := func(pid int) {
		t.Helper()
		b := fmt.Sprintf(`{"version":%d,"pid":%d,"gpus":[]}`, nodestatus.Version, pid)
		if err := os.WriteFile(nodestatus.Path(dir), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(os.Getpid())
	if err := m.Create(context.Background(), "g", Resources{}, CreateOptions{}); err != nil {
		t.Fatalf("with an older daemon running: %v", err)
	}
	write(deadPID(t))
	if err := m.Set(context.Background(), "g", Resources{}); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("with a stale status: %v, want ErrNotApplied", err)
	}
}

// deadPID is the pid of a process that has exited.
func deadPID(t *testing.T) int {
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

// A Set that changes only a group's GPUs does not wait for the daemon (it has
// nothing to apply for them); one that changes a setting does.
func TestGPUsOnlyNotWaited(t *testing.T) {
	dir := t.TempDir()
	m := New(Config{RunDir: dir, Timeout: 100 * time.Millisecond})
	ctx := context.Background()
	s := group.Settings{MemoryMax: 1 << 30}
	if err := m.Create(ctx, "g", Resources{Settings: s}, CreateOptions{Container: true, NoWait: true}); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(ctx, "g", Resources{Settings: s, GPUs: []string{"GPU-a"}}); err != nil {
		t.Fatalf("GPUs only, no daemon: %v", err)
	}
	s.MemoryMax = 2 << 30
	if err := m.Set(ctx, "g", Resources{Settings: s, GPUs: []string{"GPU-a"}}); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("a new memory.max without a daemon: %v, want ErrNotApplied", err)
	}
}

// TestRemadeGroupApplied: a group removed and made again under the same name,
// 20 times under one daemon, as `gpuslice run --group`/`group rm` do and as
// the node agent and the DRA driver do (a container's group): the daemon
// applies each new group (its limit in the new state file, the generation
// acknowledged). A daemon that kept the generation it acknowledged for the
// removed group took the new group's as already applied and never applied it
// (issue 38: Create's wait ran out); a late acknowledgement of the removed
// group's settings landing in the new directory made Create return with the
// old limit while numbers restarted at 1 (group.firstGeneration). The daemon
// applies on the group's inotify events and nothing else does, so a group it
// misses is never applied: the manager's default wait (10 s) tells that from
// a slow machine (each Create took at most 118 ms at load 11), where a 1 s
// bound on each of 40 Creates would fail a correct daemon starved a second.
func TestRemadeGroupApplied(t *testing.T) {
	dir := t.TempDir()
	startDaemon(t, dir)
	m := New(Config{RunDir: dir})
	ctx := context.Background()
	for _, o := range []CreateOptions{{Adopt: true}, {Container: true}} {
		name := map[bool]string{false: "run", true: "ctr"}[o.Container]
		for i := range 20 {
			limit := uint64(512+i) << 20
			if err := m.Create(ctx, name, Resources{Settings: group.Settings{MemoryMax: limit, Share: 0.2}}, o); err != nil {
				t.Fatalf("%s, made for the %d. time: %v", name, i+1, err)
			}
			if lim := limitOf(t, dir, name); lim != limit {
				t.Fatalf("%s, made for the %d. time: limit %d in its state file, want %d", name, i+1, lim, limit)
			}
			if err := m.Remove(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
	}
}
