package identity

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/groupstate"
)

func TestParseNSpid(t *testing.T) {
	cases := map[string]string{
		"Name:\tx\nNSpid:\t4321\t7\nNSsid:\t1\n": "[4321 7]",
		"NSpid:\t12\n":                           "[12]",
		"NSpid:\t12 x\n":                         "error",
		"NSpid:\n":                               "error",
		"NSpid:\t0\n":                            "error",
		"Name:\tx\n":                             "error",
		"NSpid:\t99999999999\n":                  "error",
	}
	for in, want := range cases {
		got, err := ParseNSpid([]byte(in))
		if s := fmt.Sprint(got); (err != nil) != (want == "error") || (err == nil && s != want) {
			t.Errorf("ParseNSpid(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	st, err := parseStartTime([]byte("7 (a) b) S 1 7 7 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 4242 10 1"))
	if err != nil || st != 4242 {
		t.Fatalf("parseStartTime = %d, %v", st, err)
	}
	for _, bad := range []string{"", "1 (x) S 1", "1 (x) S 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 x"} {
		if _, err := parseStartTime([]byte(bad)); err == nil {
			t.Errorf("parseStartTime(%q) accepted", bad)
		}
	}
}

// FuzzParseNSpid: never panics; accepted values are positive pids.
func FuzzParseNSpid(f *testing.F) {
	for _, s := range []string{"NSpid:\t1\t2\n", "NSpid:\n", "x", "NSpid: -1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := ParseNSpid([]byte(s))
		if err == nil && (len(ids) == 0 || slices.ContainsFunc(ids, func(v int32) bool { return v <= 0 })) {
			t.Fatalf("accepted %q as %v", s, ids)
		}
		_, _ = parseStartTime([]byte(s))
	})
}

// putProc writes a live process entry i into a state file.
func putProc(t *testing.T, path string, i int, p groupstate.Process) {
	t.Helper()
	b := make([]byte, groupstate.ProcSize)
	le := binary.LittleEndian
	le.PutUint32(b, groupstate.ProcLive)
	le.PutUint32(b[groupstate.ProcOffPID:], uint32(p.PID))
	le.PutUint32(b[groupstate.ProcOffHostPID:], uint32(p.HostPID))
	le.PutUint64(b[groupstate.ProcOffStart:], p.StartTime)
	le.PutUint64(b[groupstate.ProcOffPIDNS:], p.PIDNS)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, int64(groupstate.HeaderSize+groupstate.MaxGPUs*groupstate.GPUSize+i*groupstate.ProcSize)); err != nil {
		t.Fatal(err)
	}
}

func TestCreateGroupStateAndHostPIDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), groupstate.FileName)
	if err := groupstate.Create("/proc", path, "k8s-x"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ns unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &ns); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if _, _, err := groupstate.CheckHeader(b); err != nil || len(b) != groupstate.FileSize || binary.LittleEndian.Uint64(b[groupstate.OffHostPIDNS:]) != ns.Ino ||
		string(b[groupstate.OffGroup:groupstate.OffGroup+5]) != "k8s-x" || fi.Mode().Perm() != 0o666 {
		t.Fatalf("created file: %v, %d bytes, host ns %d (want %d), mode %v", err, len(b), binary.LittleEndian.Uint64(b[groupstate.OffHostPIDNS:]), ns.Ino, fi.Mode())
	}
	putProc(t, path, 3, groupstate.Process{PID: 7, PIDNS: 99, StartTime: 500})
	putProc(t, path, 5, groupstate.Process{PID: 8, PIDNS: 99, StartTime: 600, HostPID: 1234})
	if err := groupstate.Create("/proc", path, "k8s-x"); err != nil { // kept as it is
		t.Fatal(err)
	}
	if ok, err := groupstate.SetHostPID(path, 7, 99, 501, 4321); ok || err != nil {
		t.Fatalf("start time mismatch filled: %v %v", ok, err)
	}
	if ok, err := groupstate.SetHostPID(path, 7, 98, 500, 4321); ok || err != nil {
		t.Fatalf("pid namespace mismatch filled: %v %v", ok, err)
	}
	if ok, err := groupstate.SetHostPID(path, 7, 99, 500, 4321); !ok || err != nil {
		t.Fatalf("groupstate.SetHostPID: %v %v", ok, err)
	}
	procs, err := groupstate.Processes(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []groupstate.Process{{PID: 7, HostPID: 4321, StartTime: 500, PIDNS: 99}, {PID: 8, HostPID: 1234, StartTime: 600, PIDNS: 99}}
	if !slices.Equal(procs, want) {
		t.Fatalf("groupstate.Processes = %+v, want %+v", procs, want)
	}
}

func TestCreateGroupStateRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string][]byte{"short": []byte("not a state file"), "magic": make([]byte, groupstate.FileSize)} {
		path := filepath.Join(dir, name)
		if name == "magic" {
			binary.LittleEndian.PutUint64(content, 0x1234)
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := groupstate.Create("/proc", path, "g"); !errors.Is(err, groupstate.ErrBad) {
			t.Errorf("%s: err = %v, want groupstate.ErrBad", name, err)
		}
		if got, _ := os.ReadFile(path); string(got) != string(content) {
			t.Errorf("%s: a bad file was changed", name)
		}
		if _, err := groupstate.Processes(path); !errors.Is(err, groupstate.ErrBad) {
			t.Errorf("%s: groupstate.Processes err = %v", name, err)
		}
	}
}
