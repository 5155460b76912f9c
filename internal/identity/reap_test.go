package identity

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/groupstate/groupstatetest"
)

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
	if ns, err = PIDNS("/proc"); err != nil {
		t.Fatal(err)
	}
	return start, ns
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
	groupstatetest.AddMember(t, path, 0, int32(os.Getpid()), start, ns, 100)
	groupstatetest.AddMember(t, path, 1, groupstatetest.DeadPID(t), start, ns, 2000)
	groupstatetest.AddMember(t, path, 2, int32(os.Getpid()), start+1, ns, 30000) // pid reused
	groupstatetest.AddMember(t, path, 3, 12345, start, ns+1, 400000)             // another namespace: its host pid decides
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
