package identity

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/groupstate/groupstatetest"
)

// An entry of another pid namespace without a host pid is found by its
// namespace and pid among the processes a scan saw; its absence proves it
// dead only from a complete scan that has its namespace in view.
func TestReapNSLocate(t *testing.T) {
	procs := []nsProc{{HostPID: 500, NS: 7, NSPID: 1}, {HostPID: 501, NS: 7, NSPID: 2}, {HostPID: 900, NS: 8, NSPID: 2}}
	for _, tc := range []struct {
		name            string
		p               groupstate.Process
		complete, all   bool
		hostPID         int32
		found, wantDead bool
	}{
		{"found", groupstate.Process{PID: 2, PIDNS: 7}, true, false, 501, true, false},
		{"found, other namespace same pid", groupstate.Process{PID: 2, PIDNS: 8}, true, false, 900, true, false},
		{"found though the scan was incomplete", groupstate.Process{PID: 1, PIDNS: 7}, false, false, 500, true, false},
		{"namespace seen, pid absent", groupstate.Process{PID: 3, PIDNS: 7}, true, false, 0, false, true},
		{"pid absent, incomplete scan", groupstate.Process{PID: 3, PIDNS: 7}, false, true, 0, false, false},
		{"namespace gone, initial namespace sees all", groupstate.Process{PID: 1, PIDNS: 9}, true, true, 0, false, true},
		{"namespace not in view", groupstate.Process{PID: 1, PIDNS: 9}, true, false, 0, false, false},
		{"namespace gone, incomplete scan", groupstate.Process{PID: 1, PIDNS: 9}, false, true, 0, false, false},
	} {
		hp, found, dead := indexNS(procs, tc.complete, tc.all).locate(tc.p)
		if hp != tc.hostPID || found != tc.found || dead != tc.wantDead {
			t.Errorf("%s: locate = %d %v %v, want %d %v %v", tc.name, hp, found, dead, tc.hostPID, tc.found, tc.wantDead)
		}
	}
	if _, found, dead := (nsIndex{}).locate(groupstate.Process{PID: 1, PIDNS: 9}); found || dead {
		t.Errorf("no scan decides nothing: %v %v", found, dead)
	}
	for _, tc := range []struct {
		p    groupstate.Process
		want bool
	}{
		{groupstate.Process{PID: 5, PIDNS: 1}, false},              // our namespace
		{groupstate.Process{PID: 5, PIDNS: 2, HostPID: 77}, false}, // host pid known
		{groupstate.Process{PID: 5, PIDNS: 2}, true},
	} {
		if got := needsScan(1, tc.p); got != tc.want {
			t.Errorf("needsScan(%+v) = %v", tc.p, got)
		}
	}
}

// childOf is the pid of a child of pid (from /proc/<pid>/stat's ppid of
// every process), waiting up to 10 s for one.
func childOf(t *testing.T, pid int) int32 {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		dirs, err := filepath.Glob("/proc/[0-9]*/stat")
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dirs {
			b, err := os.ReadFile(d)
			if err != nil {
				continue // exited meanwhile
			}
			s := string(b)
			f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
			if len(f) > 1 && f[1] == strconv.Itoa(pid) {
				c, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
				if err != nil {
					t.Fatal(err)
				}
				return int32(c)
			}
		}
	}
	t.Fatalf("pid %d has no child", pid)
	return 0
}

// TestReliabilityReapOtherPIDNamespace: members of a pid namespace of their
// own whose host pid was never written (their hello failed) are decided from
// the kernel: a live one keeps its memory (and gets its host pid), a killed
// one is reaped while its namespace lives on, and so is one whose whole
// namespace is gone (when the daemon's namespace is the initial one, which
// sees every namespace; elsewhere a namespace out of view stays undecided).
func TestReliabilityReapOtherPIDNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs processes in a new pid namespace (unshare -p)")
	}
	path := filepath.Join(t.TempDir(), groupstate.FileName)
	if err := groupstate.Create("/proc", path, "g"); err != nil {
		t.Fatal(err)
	}
	// pid 1: sh (then sleep); pid 2: the member, killed when asked.
	cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", "sh", "-c",
		`sleep 1000 & read x; kill -9 $!; wait $!; echo killed; exec sleep 1000`)
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
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	initPID := childOf(t, cmd.Process.Pid)
	memberPID := childOf(t, int(initPID))
	initID, err := Of("/proc", initPID)
	if err != nil {
		t.Fatal(err)
	}
	member, err := Of("/proc", memberPID)
	if err != nil {
		t.Fatal(err)
	}
	if !member.Nested || member.PID != 2 || initID.PID != 1 || member.NS != initID.NS {
		t.Fatalf("member %+v, init %+v: want pids 2 and 1 of one namespace below ours", member, initID)
	}
	groupstatetest.AddMember(t, path, 0, member.PID, member.Start, member.NS, 1000)
	assertReap(t, path, 0, 1000)
	ps, err := groupstate.Processes(path)
	if err != nil || len(ps) != 1 || ps[0].HostPID != memberPID {
		t.Fatalf("entries %+v (%v): want the live member with host pid %d", ps, err, memberPID)
	}
	if ok, err := groupstate.SetHostPID(path, member.PID, member.NS, member.Start, 0); !ok || err != nil {
		t.Fatalf("clearing the host pid: %v %v", ok, err) // as if never written
	}
	if _, err := io.WriteString(in, "kill\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "killed\n" {
		t.Fatalf("member not killed: %q %v", line, err)
	}
	assertReap(t, path, 1, 0)

	// The namespace's init as a member, then the whole namespace killed.
	groupstatetest.AddMember(t, path, 1, initID.PID, initID.Start, initID.NS, 2000)
	assertReap(t, path, 0, 2000)
	if ok, err := groupstate.SetHostPID(path, initID.PID, initID.NS, initID.Start, 0); !ok || err != nil {
		t.Fatalf("clearing the host pid: %v %v", ok, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // unshare's exit status: killed
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", initPID)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still there", initPID)
		}
	}
	ourNS, err := PIDNS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if ourNS == initPIDNS {
		assertReap(t, path, 1, 0)
	} else {
		t.Logf("not the initial pid namespace (%d): a namespace gone is out of view, its member stays", ourNS)
		assertReap(t, path, 0, 2000)
	}
}

// assertReap runs ReapDead on path and checks how many entries it freed and
// the bytes left in use on GPU slot 0.
func assertReap(t *testing.T, path string, reaped int, used uint64) {
	t.Helper()
	n, err := ReapDead("/proc", path)
	if err != nil || n != reaped {
		t.Fatalf("ReapDead = %d, %v; want %d", n, err, reaped)
	}
	got, err := groupstate.ReadMemory(path)
	if err != nil || len(got) != 1 || got[0].Used != used {
		t.Fatalf("after the sweep: %+v %v, want %d bytes used", got, err, used)
	}
}
