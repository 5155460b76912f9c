package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/output"
)

func sampleStatus() *nodestatus.Status {
	return &nodestatus.Status{Version: nodestatus.Version, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), PID: 42,
		Socket: "/run/gpuslice/node.sock", PeriodNs: int64(100 * time.Millisecond), Burst: true, Connections: 3,
		GPUs: []nodestatus.GPUStatus{{UUID: "GPU-a", Holder: "train", Groups: []nodestatus.GroupGPUStatus{
			{Group: "train", Priority: "high", SliceNs: int64(20 * time.Millisecond), Share: 0.3, Expected: 0.6,
				AchievedNs: int64(1500 * time.Millisecond), AchievedShare: 0.55, BankedNs: 40000, Members: 2, Holding: true,
				Grants: 10, GrantedNs: int64(200 * time.Millisecond), Revokes: 9, Overruns: 4, OverrunP99Ns: 120000,
				OverrunMaxNs: 300000, MemoryMax: 6 << 30, MemoryUsed: 1 << 30, MemoryRefused: 1},
			{Group: "etl", Priority: "low", SliceNs: int64(10 * time.Millisecond), Expected: 0.4, Members: 1, Waiting: true},
		}}},
		Memory: []nodestatus.MemoryGPUStatus{{UUID: "GPU-b", Groups: []nodestatus.MemoryGroupStatus{
			{Group: "etl", Min: 1 << 30, Max: 4 << 30, Spill: true, Used: 2 << 30, Guaranteed: 1 << 30, Borrowed: 1 << 30, Allowance: 2 << 30},
		}}},
	}
}

func sampleSMI() SMIDoc {
	return SMIDoc{TypeMeta: output.Meta("SMI"), Driver: "570.1", Simulated: true, GPUs: []SMIGPU{
		{Index: 0, Name: "Sim A100", UUID: "GPU-a", MemoryTotal: 40 << 30, MemoryUsed: 1 << 30, MemoryFree: 39 << 30,
			Utilization: 50, MemoryUtilization: 10, Processes: []SMIProcess{{PID: 7, Memory: 1 << 30}}},
		{Index: 1, Name: "Sim A100", UUID: "GPU-b", MemoryTotal: 40 << 30, Processes: []SMIProcess{}},
	}}
}

// golden compares got with testdata/name; GPUSLICE_UPDATE_GOLDEN=1 rewrites it.
// A changed golden file is a changed schema: docs/cli.md and APIVersion say when.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if os.Getenv("GPUSLICE_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s changed:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestStatusFormats(t *testing.T) {
	for _, f := range []output.Format{output.Table, output.Wide, output.JSON, output.YAML} {
		var b bytes.Buffer
		if err := writeStatus(&b, sampleStatus(), f); err != nil {
			t.Fatal(err)
		}
		golden(t, "status."+map[output.Format]string{output.Table: "table"}[f]+string(f), b.Bytes())
	}
	var doc StatusDoc
	var b bytes.Buffer
	if err := writeStatus(&b, sampleStatus(), output.JSON); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.APIVersion != output.APIVersion || doc.Kind != "Status" || len(doc.GPUs) != 2 || doc.GPUs[1].UUID != "GPU-b" ||
		len(doc.GPUs[1].ElasticMemory) != 1 || doc.GPUs[0].Groups[0].GPUTimeNs != int64(1500*time.Millisecond) {
		t.Errorf("status document %+v", doc)
	}
}

func TestStatusEmpty(t *testing.T) {
	st := &nodestatus.Status{Version: nodestatus.Version, PID: 1}
	var b bytes.Buffer
	if err := writeStatus(&b, st, output.Table); err != nil || !strings.Contains(b.String(), "no GPU in use") {
		t.Errorf("table %q %v", b.String(), err)
	}
	b.Reset()
	if err := writeStatus(&b, st, output.JSON); err != nil || !strings.Contains(b.String(), `"gpus": []`) {
		t.Errorf("json %q %v; want an empty list, not null", b.String(), err)
	}
}

func TestSMIFormats(t *testing.T) {
	for _, f := range []output.Format{output.Table, output.Wide, output.JSON, output.YAML} {
		var b bytes.Buffer
		if err := writeSMI(&b, sampleSMI(), f); err != nil {
			t.Fatal(err)
		}
		golden(t, "smi."+map[output.Format]string{output.Table: "table"}[f]+string(f), b.Bytes())
	}
}

// groupCLI runs gpuslice group ... against a run directory of the test's own.
func groupCLI(t *testing.T, runDir string, args ...string) (int, string, string) {
	t.Helper()
	env, out, errOut := testEnv(t, "GPUSLICE_RUN_DIR="+runDir)
	code := Main(context.Background(), append([]string{"group"}, args...), env)
	return code, out.String(), errOut.String()
}

func TestGroupCommands(t *testing.T) {
	dir := t.TempDir()
	if code, out, errOut := groupCLI(t, dir, "set", "train", "slice=20ms", "priority=high", "memory.max=6Gi"); code != 0 ||
		!strings.Contains(out, "memory.max 6442450944\n") || !strings.Contains(out, "slice 20ms\n") {
		t.Fatalf("set: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if err := group.NewTree(dir).WriteFile("train", group.FileMemoryCurrent, "1048576\n"); err != nil {
		t.Fatal(err)
	}
	code, out, _ := groupCLI(t, dir, "get", "train")
	if code != 0 || !strings.Contains(out, "priority high\n") || !strings.Contains(out, "memory.current 1048576\n") ||
		!strings.Contains(out, "burst.banked -\n") {
		t.Errorf("get: exit %d, %q", code, out)
	}
	if code, out, _ := groupCLI(t, dir, "get", "train", "slice"); code != 0 || out != "slice 20ms\n" {
		t.Errorf("get FILE: exit %d, %q", code, out)
	}
	code, out, _ = groupCLI(t, dir, "get", "train", "-o", "json")
	var d GroupDoc
	if err := json.Unmarshal([]byte(out), &d); code != 0 || err != nil || d.APIVersion != output.APIVersion || d.Kind != "Group" ||
		d.Name != "train" || d.Settings["memory.max"] != "6442450944" || d.Status["memory.current"] != "1048576" {
		t.Errorf("get -o json: exit %d, %v, %+v", code, err, d)
	}
	for _, f := range group.SettingFiles() {
		if _, ok := d.Settings[f]; !ok {
			t.Errorf("get -o json: no setting %s", f)
		}
	}
	groupCLI(t, dir, "set", "etl", "share=30%")
	code, out, _ = groupCLI(t, dir, "ls", "-o", "yaml")
	var l GroupListDoc
	if err := yaml.Unmarshal([]byte(out), &l); code != 0 || err != nil || l.Kind != "GroupList" || len(l.Items) != 2 ||
		l.Items[0].Name != "etl" || l.Items[0].Settings["share"] != "30%" {
		t.Errorf("ls -o yaml: exit %d, %v, %+v", code, err, l)
	}
	code, out, _ = groupCLI(t, dir, "ls")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 3 ||
		strings.Join(strings.Fields(lines[0]), " ") != "GROUP PRIORITY SLICE SHARE MEMORY.MAX MEMORY.CURRENT" ||
		strings.Join(strings.Fields(lines[2]), " ") != "train high 20ms default 6442450944 1048576" {
		t.Errorf("ls: exit %d, %q", code, out)
	}
	code, out, _ = groupCLI(t, dir, "ls", "-o", "wide")
	if code != 0 || !strings.Contains(out, "MEMORY.MIN") || !strings.Contains(out, "GPU_TIME.ACHIEVED") {
		t.Errorf("ls -o wide: exit %d, %q", code, out)
	}
	if code, out, _ := groupCLI(t, dir, "get", "train", "-o", "wide"); code != 0 || !strings.Contains(out, "MEMORY.SPILL") {
		t.Errorf("get -o wide: exit %d, %q", code, out)
	}
	for _, args := range [][]string{{"get", "train", "slice", "-o", "json"}, {"ls", "-o", "bogus"}, {"get", "train", "-o"}} {
		if code, _, errOut := groupCLI(t, dir, args...); code != 2 || !strings.HasPrefix(errOut, "gpuslice: ") {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a message", args, code, errOut)
		}
	}
	if code, _, errOut := groupCLI(t, dir, "rm", "etl"); code != 0 {
		t.Fatalf("rm: exit %d: %s", code, errOut)
	}
	if code, _, _ := groupCLI(t, dir, "get", "etl"); code != 2 {
		t.Errorf("get after rm: exit %d, want 2", code)
	}
}

// TestStaleStatus: a status the daemon stopped rewriting (older than 2 s, or
// its writer gone) is said to be stale; a fresh one from a live daemon is not.
func TestStaleStatus(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	alive := func(pid int) bool { return pid == 42 }
	for _, c := range []struct {
		age   time.Duration
		pid   int
		stale string
	}{
		{0, 42, ""},
		{time.Second, 42, ""},
		{-time.Second, 42, ""}, // the wall clock stepped back
		{3 * time.Second, 42, "3s old: the node daemon (pid 42) stopped writing it"},
		{time.Hour, 42, "1h0m0s old"},
		{0, 43, "the node daemon that wrote it (pid 43) is gone"},
	} {
		st := sampleStatus()
		st.Time, st.PID = now.Add(-c.age), c.pid
		got := staleStatus(st, now, alive)
		if (c.stale == "") != (got == "") || !strings.Contains(got, c.stale) {
			t.Errorf("age %v pid %d: %q, want %q", c.age, c.pid, got, c.stale)
		}
	}
}
