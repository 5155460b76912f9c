package timeslice

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// addMember writes a live process entry holding used bytes on GPU slot 0 (as
// the library does) into a state file made by groupstate.Create.
func addMember(t *testing.T, path string, i int, pid int32, start, pidns, used uint64) {
	t.Helper()
	s, err := groupstate.Open(path, false, groupstate.LockWait)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	off := groupstate.HeaderSize + groupstate.MaxGPUs*groupstate.GPUSize + i*groupstate.ProcSize
	atomic.StoreUint32(s.U32(off+groupstate.ProcOffPID), uint32(pid))
	atomic.StoreUint64(s.U64(off+groupstate.ProcOffStart), start)
	atomic.StoreUint64(s.U64(off+groupstate.ProcOffPIDNS), pidns)
	atomic.StoreUint64(s.U64(off+groupstate.ProcOffUsed), used)
	atomic.StoreUint32(s.U32(off), groupstate.ProcLive)
	atomic.StoreUint32(s.U32(groupstate.HeaderSize), groupstate.SlotReady)
	atomic.AddUint64(s.U64(groupstate.HeaderSize+groupstate.GPUOffUsed), used)
}

// selfIdentity is this process's start time and pid namespace.
func selfIdentity(t *testing.T) (start, ns uint64) {
	t.Helper()
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	if start, err = parseStartTime(stat); err != nil {
		t.Fatal(err)
	}
	if ns, err = pidNS("/proc"); err != nil {
		t.Fatal(err)
	}
	return start, ns
}

// deadPID is the pid of a process that has exited and been waited for.
func deadPID(t *testing.T) int32 {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return int32(c.Process.Pid)
}

// Dead members' memory is released by the daemon's sweep, not only when a
// member next allocates: an exited process, and a reused pid (other start
// time); a live member keeps its memory and its entry; `group rm` counts the
// live ones.
func TestGroupStateReapsDeadMembers(t *testing.T) {
	path := filepath.Join(t.TempDir(), groupstate.FileName)
	if err := groupstate.Create("/proc", path, "g"); err != nil {
		t.Fatal(err)
	}
	start, ns := selfIdentity(t)
	addMember(t, path, 0, int32(os.Getpid()), start, ns, 100)
	addMember(t, path, 1, deadPID(t), start, ns, 2000)
	addMember(t, path, 2, int32(os.Getpid()), start+1, ns, 30000) // pid reused
	addMember(t, path, 3, 12345, start, ns+1, 400000)             // another namespace: its host pid decides
	if ok, err := groupstate.SetHostPID(path, 12345, ns+1, start, int32(os.Getpid())); !ok || err != nil {
		t.Fatalf("groupstate.SetHostPID: %v %v", ok, err)
	}
	if n, err := LiveMembers("/proc", path); err != nil || n != 2 {
		t.Fatalf("LiveMembers = %d, %v; want 2 (self, by its host pid)", n, err)
	}
	n, err := ReapDead("/proc", path)
	if err != nil || n != 2 {
		t.Fatalf("ReapDead = %d, %v; want 2", n, err)
	}
	got, err := groupstate.ReadMemory(path)
	if err != nil || len(got) != 1 || got[0].Used != 400100 {
		t.Fatalf("after the sweep: %+v %v, want 400100 bytes used", got, err)
	}
	ps, err := groupstate.Processes(path)
	if err != nil || len(ps) != 2 {
		t.Fatalf("entries left: %+v %v", ps, err)
	}
	if n, err := ReapDead("/proc", path); err != nil || n != 0 {
		t.Fatalf("second sweep freed %d (%v)", n, err)
	}
}

// The daemon releases a dead member's memory on its own, at its status
// refresh (every 250 ms by default): memory.current drops to what the live
// members hold without anyone allocating.
func TestGroupStateDaemonReapsDeadMembers(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "reap")
	state := filepath.Join(cfg.RunDir, "groups", "reap", groupstate.FileName)
	if err := groupstate.Create("/proc", state, "reap"); err != nil {
		t.Fatal(err)
	}
	start, ns := selfIdentity(t)
	addMember(t, state, 0, int32(os.Getpid()), start, ns, 4096)
	addMember(t, state, 1, deadPID(t), start, ns, 1<<30) // without the sweep: 1 GiB + 4096 for good
	began := time.Now()
	startDaemon(t, cfg)
	for deadline := began.Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cur, _ := group.NewTree(cfg.RunDir).ReadFile("reap", group.FileMemoryCurrent)
		if cur == "4096" {
			t.Logf("dead member's memory released %v after the daemon started (status refresh %v)",
				time.Since(began).Round(time.Millisecond), cfg.StatusEvery)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("memory.current = %q, want 4096", cur)
		}
	}
}
