//go:build timeslicee2e

package timeslicee2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/identity"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/internal/proto"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// What the daemon does when what makes it reachable is lost (docs/timeslice.md,
// "The daemon"): its socket file, its run directory. In make test-reliability.

// reachableWithin waits until a daemon answers on socket, at most within.
func reachableWithin(t *testing.T, socket string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for !client.Reachable(context.Background(), socket) {
		if time.Since(start) > within {
			t.Fatalf("no daemon answers on %s %v after it was lost (want within %v)", socket, time.Since(start), within)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// TestReliabilitySocketLost: the daemon's socket file removed (or another file
// put in its place) under a running daemon: the daemon makes it again within
// 1 s, the connections already open go on, and a new `gpuslice run` is served
// with no fail-open warning. Before, the daemon kept running and kept the run
// directory's lock, serving nobody: a new run waited 10 s and ran ungated
// (issue 38).
func TestReliabilitySocketLost(t *testing.T) {
	e := setupE2E(t)
	cfg := testCfg(t)
	startDaemon(t, cfg)
	held, err := client.Dial(context.Background(), cfg.Socket) // connected before: goes on
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close() //nolint:errcheck // the test's connection
	gpu := testGPUs()[0]
	for _, how := range []string{"removed", "replaced by a file"} {
		if err := os.Remove(cfg.Socket); err != nil {
			t.Fatal(err)
		}
		if how != "removed" {
			if err := os.WriteFile(cfg.Socket, []byte("not a socket"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		took := reachableWithin(t, cfg.Socket, time.Second)
		t.Logf("socket %s: a daemon answers again after %v", how, took.Round(time.Millisecond))
		g, err := held.Acquire(gpu)
		if err != nil {
			t.Fatalf("a connection opened before the socket was %s: %v", how, err)
		}
		if err := held.Release(gpu, g.Seq, false); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(filepath.Join(e.bin, "gpuslice"), "run", "--share", "30%", "--", "true")
		cmd.Env = append(os.Environ(), "GPUSLICE_RUN_DIR="+cfg.RunDir, nodestatus.EnvSocket+"="+cfg.Socket)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || strings.Contains(stderr.String(), "without time slices") {
			t.Fatalf("gpuslice run after the socket was %s: %v, stderr %q", how, err, stderr.String())
		}
	}
	if pids := append(daemonsOn(t, cfg.Socket), daemonsOn(t, cfg.RunDir)...); len(pids) != 0 {
		t.Fatalf("gpuslice run started daemons %v: the running one should have served it", pids)
	}
}

// TestReliabilityRunDirReplaced: a daemon whose run directory is replaced
// (moved aside and made again at once, faster than any poll for its absence)
// takes the new directory: it holds its lock (a second daemon is refused) and
// serves it. Where another daemon took the new directory first, it steps
// aside: it stops, never granting next to a daemon that serves the path.
func TestReliabilityRunDirReplaced(t *testing.T) {
	for _, taken := range []bool{false, true} {
		t.Run("taken="+strconv.FormatBool(taken), func(t *testing.T) {
			cfg := testCfg(t)
			cfg.Socket = filepath.Join(t.TempDir(), "node.sock") // outside the run directory: it survives
			taking := make(chan string, 100)                     // the daemon's log lines saying it serves a directory
			logger := funcr.New(func(_, args string) {
				if strings.Contains(args, "serving") {
					select {
					case taking <- args:
					default:
					}
				}
			}, funcr.Options{})
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- timeslice.Run(ctx, cfg) }()
			waitServing(t, cfg, done)
			if err := os.Rename(cfg.RunDir, cfg.RunDir+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(cfg.RunDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if taken { // as another daemon would
				takeRunDir(t, cfg.RunDir, done)
				return
			}
			waitRetaken(t, ctx, cfg, taking)
			if !client.Reachable(ctx, cfg.Socket) {
				t.Fatal("the daemon no longer answers")
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("daemon: %v", err)
			}
		})
	}
}

// takeRunDir takes the lock of the run directory dir made again, as another
// daemon would, and waits for the daemon (done) to step aside.
func takeRunDir(t *testing.T, dir string, done <-chan error) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd) //nolint:errcheck // a test's descriptor
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("daemon: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("daemon still serves after another took its new run directory")
	}
}

// waitRetaken waits for the daemon's word (taking: its log lines) that it
// took the run directory made again; a second daemon there is then refused
// (ErrRunning): the first holds the new directory's lock.
func waitRetaken(t *testing.T, ctx context.Context, cfg timeslice.Config, taking <-chan string) {
	t.Helper()
	for deadline := time.After(10 * time.Second); ; {
		select {
		case l := <-taking:
			if !strings.Contains(l, "run directory replaced: serving it again") {
				continue
			}
		case <-deadline:
			t.Fatal("the daemon did not take the new run directory")
		}
		break
	}
	// Once: the daemon says so after it took the lock; a second daemon that
	// served (until sctx ended) beside it is a failure, not one to try again.
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if err := timeslice.Run(sctx, cfg); !errors.Is(err, timeslice.ErrRunning) {
		t.Fatalf("a second daemon on the new run directory: %v, want ErrRunning", err)
	}
}

// TestReliabilityE2ERunDirRemovedTenantsGated: the run directory removed under
// two tenants with shares 20 % and 80 % (group "a" with a 1 GiB limit, a
// member holding 256 MiB of it, its tenant and the member a 300 MiB context each): within 1 s the daemon has made it again with
// both groups' settings, and the tenants are still gated by their shares
// (the time each held the GPU, within 5 points over the seconds after); no new member of "a" gets memory
// past its limit (none is made a second state). Before, the daemon stopped:
// the tenants ran ungated (about 50/50) and the groups' settings were lost
// until someone ran `gpuslice run` (issue 36).
func TestReliabilityE2ERunDirRemovedTenantsGated(t *testing.T) {
	e := setupE2E(t)
	base := t.TempDir()
	cfg := testCfg(t)
	cfg.RunDir = filepath.Join(base, "run")
	cfg.Socket = filepath.Join(cfg.RunDir, "node.sock")
	cfg.Policy = policy.DefaultConfig()
	simState := filepath.Join(base, "sim.state")
	var before, after sliceLog // the slices the daemon hands out before and after the removal
	cfg.Observe = bothLogs(&before, &after)
	startDaemon(t, cfg)
	const limit, part = 1 << 30, 256 << 20
	m := groupmgr.New(groupmgr.Config{RunDir: cfg.RunDir})
	want := map[string]group.Settings{"a": {Share: 0.2, MemoryMax: limit}, "b": {Share: 0.8}}
	for _, n := range []string{"a", "b"} { // as `gpuslice run --group` makes them
		if err := m.Create(context.Background(), n, groupmgr.Resources{Settings: want[n]}, groupmgr.CreateOptions{Adopt: true}); err != nil {
			t.Fatal(err)
		}
	}
	fileA := groupstate.Path(cfg.RunDir, "a")
	if r, _ := startMemfill(t, e, fileA, simState, part, time.Minute, "GPUSLICE_GROUP_MANAGED=1"); r.Allocated != part {
		t.Fatalf("member of a got %d bytes (%s), want %d", r.Allocated, r.StoppedBy, part)
	}
	const secs, removeAt = 7, 2
	t0 := time.Now().Add(time.Second)
	restored := make(chan error, 1)
	go func() {
		time.Sleep(time.Until(t0.Add(time.Second)))
		before.set(true)
		restored <- removeRunDirAt(cfg, want, t0.Add(removeAt*time.Second), func() { before.set(false); after.set(true) })
		time.Sleep(time.Until(t0.Add((secs - 1) * time.Second)))
		after.set(false)
	}()
	specs := []tenantSpec{
		{"a", []string{"--mode", "busy", "--kernel-us", "500", "--seconds", strconv.Itoa(secs)}},
		{"b", []string{"--mode", "busy", "--kernel-us", "500", "--seconds", strconv.Itoa(secs)}},
	}
	outs := e.run(t, cfg, simState, specs, t0)
	if err := <-restored; err != nil {
		t.Fatal(err)
	}
	wa, wb := windows(outs[0]), windows(outs[1])
	for w := 1; w < secs; w++ {
		t.Logf("second %d: a ran %d kernels, b %d", w, wa[w].kernels, wb[w].kernels)
	}
	_, _, share0, held0 := abShares(t, &before)
	_, held, share, heldShare := abShares(t, &after)
	t.Logf("a's share of the time held (of the slices handed out): %.1f %% (%.1f %%) in the second before the removal, "+
		"%.1f %% (%.1f %%) from the removal to the tenants' last second", held0*100, share0*100, heldShare*100, share*100)
	// The time each tenant held depends on the machine's load (a tenant
	// starved of CPU asks late and the work-conserving policy hands its turn
	// to the other: BenchmarkE2EShareWindows); the shares the daemon applies
	// do not: a contended slice is its group's slice of the period, share x
	// 100 ms (a's 20 ms, b's 80 ms; settings lost: the default 10 ms each),
	// less the debt of a late hand-over (most slices under load: the upper
	// quartile, not the longest, which may carry banked time).
	if held[0]+held[1] == 0 {
		t.Fatal("after the run directory was removed, neither tenant held the GPU")
	}
	sa, sb := typicalContended(&after, "a"), typicalContended(&after, "b")
	t.Logf("contended slices after the removal: a median %v upper quartile %v (%d slices), b median %v upper quartile %v (%d slices)", sa.median, sa.upper, sa.n, sb.median, sb.upper, sb.n)
	if sa.n < 3 || sb.n < 3 {
		t.Fatalf("after the run directory was removed, contended slices a %d, b %d: want 3 or more each", sa.n, sb.n)
	}
	if got := float64(sa.upper) / float64(sa.upper+sb.upper); got < 0.15 || got > 0.25 {
		t.Fatalf("after the run directory was removed, a's slice %v against b's %v: a's share %.1f %%, want 20 ± 5",
			sa.upper, sb.upper, got*100)
	}
	noSecondState(t, e, m, fileA, want["a"], simState, part)
}

// noSecondState: a new member of group "a" (settings st) while its members
// map its removed state (fileA): the groups manager refuses it, and one a run made
// (GPUSLICE_GROUP_MANAGED) makes no second state and gets nothing of the
// part bytes it asks for.
func noSecondState(t *testing.T, e *e2e, m *groupmgr.Manager, fileA string, st group.Settings, simState string, part uint64) {
	t.Helper()
	err := m.Create(context.Background(), "a", groupmgr.Resources{Settings: st}, groupmgr.CreateOptions{Adopt: true})
	if !errors.Is(err, identity.ErrOrphanedState) {
		t.Fatalf("a prepared again while its member maps the removed state: %v, want ErrOrphanedState", err)
	}
	if r, _ := startMemfill(t, e, fileA, simState, part, 0, "GPUSLICE_GROUP_MANAGED=1"); r.Allocated != 0 {
		t.Fatalf("a new member of a got %d bytes (%s) beside the 856 MiB its first members hold under 1 GiB",
			r.Allocated, r.StoppedBy)
	}
}

// bothLogs is an observer that tells both a and b of every slice.
func bothLogs(a, b *sliceLog) *timeslice.Observer {
	obs := [2]*timeslice.Observer{a.observer(), b.observer()}
	return &timeslice.Observer{
		Slice: func(gpu proto.UUID, group string, length time.Duration, seq uint64, contended bool) {
			obs[0].Slice(gpu, group, length, seq, contended)
			obs[1].Slice(gpu, group, length, seq, contended)
		},
		Held: func(gpu proto.UUID, group string, held time.Duration) {
			obs[0].Held(gpu, group, held)
			obs[1].Held(gpu, group, held)
		}}
}

// abShares is what groups "a" and "b" were granted and held in l, and a's
// share of each; it logs their contended slices.
func abShares(t *testing.T, l *sliceLog) (granted, held [2]time.Duration, share, heldShare float64) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var contended [2]time.Duration
	for _, sl := range l.slices {
		granted[map[string]int{"a": 0, "b": 1}[sl.group]] += sl.length
		if sl.contended {
			contended[map[string]int{"a": 0, "b": 1}[sl.group]] += sl.length
		}
	}
	t.Logf("contended slices: a %v b %v: %.1f %%", contended[0], contended[1], 100*float64(contended[0])/float64(contended[0]+contended[1]))
	for _, sl := range l.held {
		held[map[string]int{"a": 0, "b": 1}[sl.group]] += sl.length
	}
	return granted, held, float64(granted[0]) / float64(granted[0]+granted[1]), float64(held[0]) / float64(held[0]+held[1])
}

// contendedSlices is the median length of a group's contended slices and how
// many there were.
type contendedSlices struct {
	median, upper time.Duration
	n             int
}

func typicalContended(l *sliceLog, group string) contendedSlices {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ls []time.Duration
	for _, sl := range l.slices {
		if sl.group == group && sl.contended {
			ls = append(ls, sl.length)
		}
	}
	if len(ls) == 0 {
		return contendedSlices{}
	}
	slices.Sort(ls)
	return contendedSlices{median: ls[len(ls)/2], upper: ls[len(ls)*3/4], n: len(ls)}
}

// removeRunDir removes a run directory as rm -r does, under a running daemon:
// it may make a file (status, a read-back file) in a directory between
// RemoveAll's last listing of it and its removal.
func removeRunDir(dir string) error {
	err := os.RemoveAll(dir)
	for try := 0; err != nil && try < 10; try++ {
		err = os.RemoveAll(dir)
	}
	return err
}

// removeRunDirAt removes cfg's run directory at the instant at (then calls
// removed) and checks that the daemon made it again within 1 s with groups
// of the settings want, applied (their generation acknowledged). The 1 s is
// the daemon's, not the test's: it is read from the files the daemon made
// (its socket bound again, each group's FileApplied written after its limit),
// against the instant before the removal started (never later than the
// removal, however late a starved test goroutine runs); the test looks for them
// for up to 10 s (a bound for a starved observer, not the contract).
func removeRunDirAt(cfg timeslice.Config, want map[string]group.Settings, at time.Time, then func()) error {
	time.Sleep(time.Until(at))
	// The instant before the removal starts: taken after it, a goroutine
	// starved between the two would start the daemon's 1 s late (lenient).
	removed := time.Now()
	if err := removeRunDir(cfg.RunDir); err != nil {
		return err
	}
	then()
	tree := group.NewTree(cfg.RunDir)
	for {
		ok := client.Reachable(context.Background(), cfg.Socket)
		for n, st := range want {
			got, err := tree.Read(n)
			gen, _ := tree.Generation(n)
			applied, _ := tree.Applied(n)
			ok = ok && err == nil && got == st && gen > 0 && applied == gen
		}
		if ok {
			break
		}
		if time.Since(removed) > 10*time.Second {
			return errors.New("10 s after the run directory was removed, the daemon does not answer on it " +
				"or has not restored and applied every group's settings")
		}
		time.Sleep(10 * time.Millisecond)
	}
	files := []string{cfg.Socket}
	for n := range want {
		files = append(files, filepath.Join(tree.Path(n), group.FileApplied))
	}
	for _, f := range files {
		fi, err := os.Lstat(f)
		if err != nil {
			return err
		}
		if took := fi.ModTime().Sub(removed); took > time.Second {
			return fmt.Errorf("%s made %v after the run directory was removed, want within 1 s", f, took.Round(time.Millisecond))
		}
	}
	return nil
}

// TestReliabilityRunDirRemovedRestoresHeldGroups: a run directory removed
// under a daemon comes back with the groups the daemon held (their settings,
// cgroup binding and GPUs), not with one its owner removed just before (as
// `gpuslice run` removes its own group when its command ends).
func TestReliabilityRunDirRemovedRestoresHeldGroups(t *testing.T) {
	cfg := testCfg(t)
	cfg.RunDir = filepath.Join(t.TempDir(), "run")
	cfg.Socket = filepath.Join(cfg.RunDir, "node.sock")
	startDaemon(t, cfg)
	m := groupmgr.New(groupmgr.Config{RunDir: cfg.RunDir})
	ctx := context.Background()
	kept := groupmgr.Resources{Settings: group.Settings{Slice: 7 * time.Millisecond, MemoryMax: 1 << 30}, GPUs: []string{"GPU-a", "GPU-b"}}
	for _, n := range []string{"kept", "removed"} {
		if err := m.Create(ctx, n, kept, groupmgr.CreateOptions{Container: true, GateOff: true}); err != nil {
			t.Fatal(err)
		}
	}
	tree := m.Tree()
	if err := tree.WriteFile("kept", group.FileCgroup, "/kubepods/pod1/ctr1\n"); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(ctx, "kept", groupmgr.Resources{Settings: kept.Settings}); err != nil { // applied: the daemon read the binding before
		t.Fatal(err)
	}
	if err := m.Remove(ctx, "removed"); err != nil {
		t.Fatal(err)
	}
	if err := removeRunDir(cfg.RunDir); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !tree.Exists("kept"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the group the daemon held was not restored")
		}
	}
	got, err := m.Get("kept")
	if err != nil || got.Settings != kept.Settings || !slices.Equal(got.GPUs, kept.GPUs) {
		t.Fatalf("restored group: %+v %v, want %+v", got, err, kept)
	}
	for f, want := range map[string]string{group.FileCgroup: "/kubepods/pod1/ctr1", group.FileGateOff: "off"} {
		if v, err := tree.ReadFile("kept", f); err != nil || v != want {
			t.Fatalf("restored %s: %q %v, want %q", f, v, err, want)
		}
	}
	if _, err := os.Stat(groupstate.Path(cfg.RunDir, "kept")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a restored group has a state file (%v): its members map the removed one", err)
	}
	if tree.Exists("removed") {
		t.Fatal("a group its owner removed came back with the run directory")
	}
}
