package runner

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/groupstate"
)

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func TestEnviron(t *testing.T) {
	s := &Spec{
		Group: "g1", RunDir: "/r", Library: "/opt/gs/libgpuslice.so", MemoryLimit: 1 << 30,
		VisibleGPUs: []string{"GPU-a", "GPU-b"}, SimLibDir: "/opt/gs/sim",
		Env: []string{"PATH=/bin", "LD_PRELOAD=/x.so /opt/gs/libgpuslice.so", "LD_LIBRARY_PATH=/usr/lib", "GPUSLICE_MEMORY_LIMIT=5"},
	}
	m := envMap(Environ(s))
	want := map[string]string{
		"PATH":                   "/bin",
		"LD_PRELOAD":             "/opt/gs/libgpuslice.so /x.so",
		"LD_LIBRARY_PATH":        "/opt/gs/sim:/usr/lib",
		"GPUSLICE_GROUP":         "g1",
		"GPUSLICE_GROUP_FILE":    "/r/groups/g1/" + groupstate.FileName,
		"GPUSLICE_GROUP_MANAGED": "1",
		"CUDA_VISIBLE_DEVICES":   "GPU-a,GPU-b",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
	// The limit is the group's (its state file, written by the time-slice daemon), not the environment's.
	if v, ok := m["GPUSLICE_MEMORY_LIMIT"]; ok {
		t.Errorf("GPUSLICE_MEMORY_LIMIT = %q: the environment is no channel for the limit", v)
	}
}

func TestEnvironNoLimitDropsInheritedLimit(t *testing.T) {
	s := &Spec{Group: "g", RunDir: "/r", Library: "/l.so", Env: []string{"GPUSLICE_MEMORY_LIMIT=5", "CUDA_VISIBLE_DEVICES=0"}}
	m := envMap(Environ(s))
	if _, ok := m["GPUSLICE_MEMORY_LIMIT"]; ok {
		t.Errorf("inherited GPUSLICE_MEMORY_LIMIT kept: %q", m["GPUSLICE_MEMORY_LIMIT"])
	}
	if m["CUDA_VISIBLE_DEVICES"] != "0" {
		t.Errorf("CUDA_VISIBLE_DEVICES = %q, want inherited 0", m["CUDA_VISIBLE_DEVICES"])
	}
	if _, ok := m["LD_LIBRARY_PATH"]; ok {
		t.Error("LD_LIBRARY_PATH set without a simulator")
	}
}

func TestRunExitCodesAndCleanup(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	cases := []struct {
		cmd  []string
		code int
	}{
		{[]string{"sh", "-c", `test -d "$(dirname "$GPUSLICE_GROUP_FILE")" && echo "$GPUSLICE_GROUP"`}, 0},
		{[]string{"sh", "-c", "exit 3"}, 3},
		{[]string{"sh", "-c", "kill -KILL $$"}, 137},
	}
	for _, c := range cases {
		out.Reset()
		s := &Spec{Command: c.cmd, Group: "t", RunDir: dir, Library: "/nonexistent.so", Env: []string{"PATH=" + os.Getenv("PATH")}, Stdout: &out, Stderr: &out}
		code, err := Run(context.Background(), s)
		if err != nil || code != c.code {
			t.Fatalf("%v: code %d, err %v, want %d (output %q)", c.cmd, code, err, c.code, out.String())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "groups", "t")); !os.IsNotExist(err) {
		t.Fatalf("group directory left behind: %v", err)
	}
}

func TestRunKeepGroupAndMissingCommand(t *testing.T) {
	dir := t.TempDir()
	s := &Spec{Command: []string{"true"}, Group: "kept", KeepGroup: true, RunDir: dir, Library: "/l.so", Env: []string{"PATH=" + os.Getenv("PATH")}}
	if code, err := Run(context.Background(), s); err != nil || code != 0 {
		t.Fatalf("true: %d %v", code, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "groups", "kept")); err != nil {
		t.Fatalf("kept group removed: %v", err)
	}
}

// TestRunNotStartedExitCodes: a command that cannot be started exits as in a
// shell: 127 when it is not found, 126 when it is found but cannot be
// executed (no execute permission, a directory, not an executable format, a
// missing interpreter), with one line on stderr. Before, 1 for all (issue 38).
func TestRunNotStartedExitCodes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		cmd  string
		code int
	}{
		{"/definitely/not/here", 127},
		{"gpuslice-no-such-command", 127},
		{write("noexec", "#!/bin/sh\n", 0o644), 126},
		{dir, 126},
		{write("garbage", "\x7fELF not really", 0o755), 126},
		{write("badinterp", "#!/definitely/not/an/interpreter\n", 0o755), 126},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		s := &Spec{Command: []string{c.cmd}, Group: "t", RunDir: dir, Library: "/l.so",
			Env: []string{"PATH=" + os.Getenv("PATH")}, Stderr: &stderr}
		code, err := Run(context.Background(), s)
		if err != nil || code != c.code || !strings.HasPrefix(stderr.String(), "gpuslice: "+c.cmd+": ") ||
			strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%s: code %d, err %v, stderr %q: want %d and one line", c.cmd, code, err, stderr.String(), c.code)
		}
	}
}

func TestRunCancelForwardsSIGTERM(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Spec{Command: []string{"sleep", "30"}, Group: "c", RunDir: t.TempDir(), Library: "/l.so", Env: []string{"PATH=" + os.Getenv("PATH")}}
	cancel()
	code, err := Run(ctx, s)
	if err != nil || code != 128+15 {
		t.Fatalf("code %d err %v, want 143", code, err)
	}
}
