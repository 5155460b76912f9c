//go:build timeslicee2e

package timeslicee2e

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/groupstate/groupstatetest"
)

// TestReliabilityLimitRestored: a member that writes a larger limit into its
// group's state file (mapped writable: the counts live there) has the group's
// memory.max put back at the next status refresh.
func TestReliabilityLimitRestored(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "mem", group.Change{File: "memory.max", Value: "3GiB"})
	state := filepath.Join(cfg.RunDir, "groups", "mem", groupstate.FileName)
	groupstatetest.WriteSlot(t, state, "GPU-0000", 4096)
	startDaemon(t, cfg)
	limit := func() uint64 {
		got, err := groupstate.ReadMemory(state)
		if err != nil || len(got) != 1 {
			t.Fatalf("read %s: %+v %v", state, got, err)
		}
		return got[0].Limit
	}
	waitLimit := func(want uint64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); limit() != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("limit %d, want %d", limit(), want)
			}
		}
	}
	waitLimit(3 << 30)
	if _, err := groupstate.SetMemoryLimit(state, 0); err != nil { // what a member could write: no limit
		t.Fatal(err)
	}
	waitLimit(3 << 30)
	// The header's limit (what a slot claimed later takes), written by
	// anything but the daemon (a member, an old CLI or agent): put back too.
	if err := groupstate.SetHeaderLimit(state, 8<<30, groupstate.LockWait); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if lim, set, err := groupstate.HeaderLimit(state); err == nil && set && lim == 3<<30 {
			break
		}
		if time.Now().After(deadline) {
			lim, set, err := groupstate.HeaderLimit(state)
			t.Fatalf("header limit %d (set %v, %v), want 3 GiB put back", lim, set, err)
		}
	}
}

// TestReliabilityLimitRestoredAfterRestart: a daemon started again on the run
// directory of a running group knows the group's limit as the one before it:
// a limit another writer put into the group's state file while no daemon ran
// (the header) is put back when it starts, one written after it came back (a
// GPU slot, then the header) at its next status refresh, and each put-back is
// logged: "...: restored", where, what was found, the limit.
func TestReliabilityLimitRestoredAfterRestart(t *testing.T) {
	cfg := testCfg(t)
	// As the groups manager sets it: numbered (a generation the daemon acknowledges).
	if _, err := groupmgr.New(groupmgr.Config{RunDir: cfg.RunDir}).Change(context.Background(), "mem",
		[]group.Change{{File: group.FileMemoryMax, Value: "3GiB"}}, true); err != nil {
		t.Fatal(err)
	}
	state := groupstate.Path(cfg.RunDir, "mem")
	groupstatetest.WriteSlot(t, state, "GPU-0000", 4096)
	header := func() uint64 {
		lim, set, err := groupstate.HeaderLimit(state)
		if err != nil || !set {
			t.Fatalf("header limit %d (set %v): %v", lim, set, err)
		}
		return lim
	}
	slot := func() uint64 {
		got, err := groupstate.ReadMemory(state)
		if err != nil || len(got) != 1 {
			t.Fatalf("read %s: %+v %v", state, got, err)
		}
		return got[0].Limit
	}
	waitBack := func(what string, get func() uint64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); get() != 3<<30; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s limit %d, want 3 GiB put back", what, get())
			}
		}
	}
	stop := startDaemonCtx(t, context.Background(), cfg)
	waitBack("header", header)
	stop()
	if err := groupstate.SetHeaderLimit(state, 8<<30, groupstate.LockWait); err != nil { // no daemon runs
		t.Fatal(err)
	}
	logs := &logLines{}
	t.Cleanup(startDaemonCtx(t, klog.NewContext(context.Background(), logs.logger()), cfg))
	waitBack("header", header)
	logs.expect(t, "restored", `"where"="header" "found"=8589934592 "limit"=3221225472 "while"="no daemon ran"`)
	if _, err := groupstate.SetMemoryLimit(state, 5<<30); err != nil { // a member's slot (header too: see below)
		t.Fatal(err)
	}
	if err := groupstate.SetHeaderLimit(state, 3<<30, groupstate.LockWait); err != nil {
		t.Fatal(err)
	}
	waitBack("slot", slot)
	logs.expect(t, "restored", `"where"="gpu GPU-0000" "found"=5368709120 "limit"=3221225472`)
	if err := groupstate.SetHeaderLimit(state, 7<<30, groupstate.LockWait); err != nil {
		t.Fatal(err)
	}
	waitBack("header", header)
	logs.expect(t, "restored", `"where"="header" "found"=7516192768 "limit"=3221225472`)
}

// logLines keeps a daemon's log lines (funcr's format: message, then
// "key"=value pairs).
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

// expect waits up to 5 s for a line with both substrings, and forgets the lines up to it.
func (l *logLines) expect(t *testing.T, msg, kv string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		l.mu.Lock()
		for i, s := range l.lines {
			if strings.Contains(s, msg) && strings.Contains(s, kv) {
				l.lines = l.lines[i+1:]
				l.mu.Unlock()
				return
			}
		}
		seen := slices.Clone(l.lines)
		l.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q and %s; lines: %q", msg, kv, seen)
		}
	}
}

// A new memory.max reaches the running processes' group state file, and the
// group's use shows in memory.current.
func TestMemoryLimitAppliesLive(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "mem")
	state := filepath.Join(cfg.RunDir, "groups", "mem", groupstate.FileName)
	groupstatetest.WriteSlot(t, state, "GPU-0000", 4096)
	startDaemon(t, cfg)
	setGroup(t, cfg, "mem", group.Change{File: "memory.max", Value: "3GiB"})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := groupstate.ReadMemory(state)
		cur, _ := group.NewTree(cfg.RunDir).ReadFile("mem", group.FileMemoryCurrent)
		if err == nil && len(got) == 1 && got[0].Limit == 3<<30 && cur == "4096" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("limit not applied: %+v %v, memory.current %q", got, err, cur)
		}
	}
}
