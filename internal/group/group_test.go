package group

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/policy"
)

func TestApply(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		file, value string
		want        Settings
		err         string
	}{
		{FileSlice, "20ms", Settings{Slice: 20 * ms}, ""},
		{FileSlice, "200us", Settings{Slice: 200 * time.Microsecond}, ""},
		{FileSlice, "5000\n", Settings{Slice: 5 * ms}, ""},
		{FileSlice, "default", Settings{}, ""},
		{FileSlice, "50us", Settings{}, "out of range"},
		{FileSlice, "1h", Settings{}, "out of range"},
		{FileSlice, "fast", Settings{}, `invalid duration "fast"`},
		{FileShare, "30%", Settings{Share: 0.3}, ""},
		{FileShare, "0.25", Settings{Share: 0.25}, ""},
		{FileShare, "30", Settings{}, "write a percentage"},
		{FileShare, "0%", Settings{}, "out of range"},
		{FileShare, "150%", Settings{}, "out of range"},
		{FileShare, "NaN", Settings{}, "invalid share"},
		{FileShare, "0.00000049", Settings{}, "below 0.0001%"},
		{FileShare, "12.3456789%", Settings{Share: 0.123457}, ""},
		{FileShareMax, "40%", Settings{ShareMax: 0.4}, ""},
		{FileShareMax, "0.25\n", Settings{ShareMax: 0.25}, ""},
		{FileShareMax, "100%", Settings{ShareMax: 1}, ""},
		{FileShareMax, "none", Settings{}, ""},
		{FileShareMax, "max", Settings{}, ""},
		{FileShareMax, "40", Settings{}, "write a percentage"},
		{FileShareMax, "0.5%", Settings{}, "below 1%"},
		{FileShareMax, "0%", Settings{}, "out of range"},
		{FileShareMax, "101%", Settings{}, "out of range"},
		{FileShareMax, "-5%", Settings{}, "out of range"},
		{FileShareMax, "Inf%", Settings{}, "invalid share"},
		{FileShareMax, "lots", Settings{}, "invalid share"},
		{FilePriority, "high", Settings{Priority: policy.High}, ""},
		{FilePriority, "urgent", Settings{}, "invalid priority"},
		{FileMemoryMax, "6GiB", Settings{MemoryMax: 6 << 30}, ""},
		{FileMemoryMax, "max", Settings{}, ""},
		{FileMemoryMax, "0", Settings{}, "zero limit"},
		{FileMemoryMax, "lots", Settings{}, "invalid size"},
		{FileMemoryMin, "6GiB", Settings{MemoryMin: 6 << 30}, ""},
		{FileMemoryMin, "0", Settings{}, ""},
		{FileMemoryMin, "-1", Settings{}, "invalid size"},
		{FileMemorySpill, "host", Settings{MemorySpill: true}, ""},
		{FileMemorySpill, "none\n", Settings{}, ""},
		{FileMemorySpill, "disk", Settings{}, "want host or none"},
		{"memory.current", "1", Settings{}, "unknown setting"},
	}
	for _, tc := range tests {
		var s Settings
		err := s.Apply(tc.file, tc.value)
		if tc.err != "" {
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s=%q: error %v, want %q", tc.file, tc.value, err, tc.err)
			}
			if s != (Settings{}) {
				t.Errorf("%s=%q: failed apply changed settings to %+v", tc.file, tc.value, s)
			}
			continue
		}
		if err != nil || s != tc.want {
			t.Errorf("%s=%q: got %+v, %v; want %+v", tc.file, tc.value, s, err, tc.want)
		}
	}
}

func TestMemoryMinAtMostMax(t *testing.T) {
	s := Settings{MemoryMax: 4 << 30}
	if err := s.Apply(FileMemoryMin, "6GiB"); err == nil || !strings.Contains(err.Error(), "above memory.max") {
		t.Fatalf("min above max: %v", err)
	}
	if err := s.Apply(FileMemoryMin, "2GiB"); err != nil || !s.Elastic() {
		t.Fatalf("min below max: %v, elastic %v", err, s.Elastic())
	}
	if (Settings{MemoryMin: 4 << 30, MemoryMax: 4 << 30}).Elastic() || (Settings{MemoryMax: 4 << 30}).Elastic() {
		t.Fatal("min == max, or no min, is a plain limit")
	}
}

func TestSliceAndShareExclusive(t *testing.T) {
	s := Settings{Slice: time.Millisecond}
	if err := s.Apply(FileShare, "40%"); err != nil || s.Slice != 0 || s.Share != 0.4 {
		t.Fatalf("share did not replace slice: %+v %v", s, err)
	}
	if err := s.Apply(FileSlice, "2ms"); err != nil || s.Share != 0 || s.Slice != 2*time.Millisecond {
		t.Fatalf("slice did not replace share: %+v %v", s, err)
	}
}

func TestTreeSetReadList(t *testing.T) {
	tr := Tree{Dir: t.TempDir()}
	s, err := tr.Set("train", []Change{{FileSlice, "20ms"}, {FilePriority, "high"}, {FileMemoryMax, "1GiB"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tr.Read("train")
	if err != nil || got != s || got.Slice != 20*time.Millisecond || got.Priority != policy.High {
		t.Fatalf("read back %+v %v, want %+v", got, err, s)
	}
	if v, _ := tr.ReadFile("train", FileMemoryMax); v != "1073741824" {
		t.Fatalf("memory.max file %q", v)
	}
	before := snapshot(t, tr.Path("train"))
	// One bad change among good ones: nothing is written.
	if _, err := tr.Set("train", []Change{{FileShare, "10%"}, {FilePriority, "urgent"}}); err == nil {
		t.Fatal("bad priority accepted")
	}
	if after := snapshot(t, tr.Path("train")); !slices.Equal(before, after) {
		t.Fatalf("failed set changed files:\n%v\n%v", before, after)
	}
	if _, err := tr.Set("Bad Name", nil); err == nil {
		t.Fatal("bad group name accepted")
	}
	if _, err := tr.Set("infer", nil); err != nil {
		t.Fatal(err)
	}
	if names, err := tr.List(); err != nil || !slices.Equal(names, []string{"infer", "train"}) {
		t.Fatalf("list %v %v", names, err)
	}
	// A hand-edited bad file is reported by Read, with the file named.
	if err := os.WriteFile(filepath.Join(tr.Path("infer"), FileSlice), []byte("soon"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Read("infer"); err == nil || !strings.Contains(err.Error(), "slice") {
		t.Fatalf("bad file read: %v", err)
	}
	if _, err := tr.Read("missing"); err == nil {
		t.Fatal("missing group read")
	}
	if err := tr.Remove("infer"); err != nil || tr.Exists("infer") {
		t.Fatalf("remove: %v", err)
	}
}

func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e.Name()+"="+string(b))
	}
	return out
}

// FuzzApply: any value either applies (and formats back to a value that parses
// to the same settings) or fails with ErrInvalid leaving the settings untouched.
func FuzzApply(f *testing.F) {
	for _, seed := range []string{"20ms", "30%", "0.3", "high", "6GiB", "max", "default", "-1", "1e400%"} {
		for i := range SettingFiles() {
			f.Add(uint8(i), seed)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, value string) {
		file := SettingFiles()[int(which)%len(SettingFiles())]
		var s Settings
		if err := s.Apply(file, value); err != nil {
			if !errors.Is(err, ErrInvalid) || s != (Settings{}) {
				t.Fatalf("%s=%q: %v, settings %+v", file, value, err, s)
			}
			return
		}
		text, err := s.Format(file)
		if err != nil {
			t.Fatal(err)
		}
		var again Settings
		if err := again.Apply(file, text); err != nil || again != s {
			t.Fatalf("%s=%q formats as %q which parses to %+v, %v; want %+v", file, value, text, again, err, s)
		}
	})
}

func TestShareMax(t *testing.T) {
	tr := Tree{Dir: t.TempDir()}
	if _, err := tr.Set("cap", []Change{{FileShare, "30%"}, {FileShareMax, "40%"}}); err != nil {
		t.Fatal(err)
	}
	if v, _ := tr.ReadFile("cap", FileShareMax); v != "40%" {
		t.Fatalf("share.max file %q", v)
	}
	got, err := tr.Read("cap")
	if err != nil || got.Params() != (policy.Params{Share: 0.3, ShareMax: 0.4}) {
		t.Fatalf("read back %+v %v", got, err)
	}
	before := snapshot(t, tr.Path("cap"))
	if _, err := tr.Set("cap", []Change{{FileShareMax, "0.1%"}}); err == nil || !errors.Is(err, ErrInvalid) {
		t.Fatalf("share.max 0.1%%: %v", err)
	}
	if after := snapshot(t, tr.Path("cap")); !slices.Equal(before, after) {
		t.Fatalf("failed set changed files:\n%v\n%v", before, after)
	}
	// A slice replaces the share; the ceiling stays.
	if s, err := tr.Set("cap", []Change{{FileSlice, "20ms"}}); err != nil || s.ShareMax != 0.4 || s.Share != 0 {
		t.Fatalf("slice: %+v %v", s, err)
	}
	if s, err := tr.Set("cap", []Change{{FileShareMax, "none"}}); err != nil || s.ShareMax != 0 {
		t.Fatalf("none: %+v %v", s, err)
	}
	if v, _ := tr.ReadFile("cap", FileShareMax); v != "none" {
		t.Fatalf("share.max file %q", v)
	}
	// Absent file: no ceiling.
	if err := os.Remove(filepath.Join(tr.Path("cap"), FileShareMax)); err != nil {
		t.Fatal(err)
	}
	if s, err := tr.Read("cap"); err != nil || s.ShareMax != 0 {
		t.Fatalf("absent: %+v %v", s, err)
	}
	for h := 100; h <= 10000; h++ { // every hundredth of a percent, as the node agent writes them
		f := float64(h) / 10000
		if got, err := ParseShareMax(FormatPercent(f)); err != nil || got != f {
			t.Fatalf("%v formats as %q, parses back as %v, %v", f, FormatPercent(f), got, err)
		}
	}
	for _, f := range []float64{0.07, 0.29, 0.57, 0.125} {
		if got, _ := ParseShareMax(FormatPercent(f)); got != f {
			t.Errorf("%v formats as %q, parses back as %v", f, FormatPercent(f), got)
		}
	}
}

// A new group appears whole (every setting file, readable by all, whatever
// the umask) and leaves no staging directory; a group made meanwhile (here: an
// empty directory) is set file by file.
func TestTreeSetNewGroupWhole(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	tr := Tree{Dir: t.TempDir()}
	if _, err := tr.Set("fresh", []Change{{FileMemoryMax, "2GiB"}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range SettingFiles() {
		st, err := os.Stat(filepath.Join(tr.Path("fresh"), f))
		if err != nil || st.Mode().Perm() != 0o644 {
			t.Fatalf("%s: %v %v", f, st, err)
		}
	}
	if v, _ := tr.ReadFile("fresh", FileMemoryMax); v != "2147483648" {
		t.Fatalf("memory.max %q", v)
	}
	if err := os.Mkdir(tr.Path("made"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Set("made", []Change{{FileSlice, "5ms"}}); err != nil {
		t.Fatal(err)
	}
	if s, err := tr.Read("made"); err != nil || s.Slice != 5*time.Millisecond {
		t.Fatalf("made: %+v %v", s, err)
	}
	ents, err := os.ReadDir(tr.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Fatalf("left behind: %s", e.Name())
		}
	}
}

// BenchmarkTreeSetNewGroup: a new group's directory (what `gpuslice run`
// writes before its command starts), made whole and renamed into place vs
// file by file (each file written beside and renamed), side by side.
func BenchmarkTreeSetNewGroup(b *testing.B) {
	dir := os.Getenv("GPUSLICE_BENCH_DIR") // the file system a run directory lives on (default: the test's temp dir)
	if dir == "" {
		dir = b.TempDir()
	}
	var s Settings
	err := s.Apply(FileMemoryMax, "1GiB")
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"staged", "file-by-file"} {
		b.Run(mode, func(b *testing.B) {
			d, err := os.MkdirTemp(dir, "bench-")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(d)
			tr, i := Tree{Dir: d}, 0
			for b.Loop() {
				name := fmt.Sprintf("%s-%d", mode[:4], i)
				i++
				if mode == "staged" {
					err = tr.createWith(name, s, nil, -1, -1)
				} else if err = tr.Create(name); err == nil {
					err = tr.Write(name, s)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRestore: a lost group is made again at once with its settings and the
// other files given; a file name that could leave the directory or shadow a
// setting is refused before anything is written; an existing group is left.
func TestRestore(t *testing.T) {
	tr := NewTree(t.TempDir())
	st := Settings{Share: 0.2, MemoryMax: 1 << 30}
	files := map[string]string{FileCgroup: "/kubepods/x\n", FileGPUs: "GPU-1\n", FileGeneration: "7\n"}
	if err := tr.Restore("g", st, files, -1, -1); err != nil {
		t.Fatal(err)
	}
	if got, err := tr.Read("g"); err != nil || got != st {
		t.Fatalf("restored settings %+v %v, want %+v", got, err, st)
	}
	for f, v := range files {
		if got, err := tr.ReadFile("g", f); err != nil || got+"\n" != v {
			t.Fatalf("restored %s: %q %v, want %q", f, got, err, v)
		}
	}
	if gen, err := tr.Generation("g"); err != nil || gen != 7 {
		t.Fatalf("generation %d %v, want 7", gen, err)
	}
	if err := tr.Restore("g", Settings{}, nil, -1, -1); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("restore over an existing group: %v, want ErrExist", err)
	}
	if got, _ := tr.Read("g"); got != st {
		t.Fatalf("an existing group's settings changed to %+v", got)
	}
	for _, bad := range []string{"", "../x", "a/b", ".hidden", FileShare} {
		if err := tr.Restore("h", st, map[string]string{bad: "x"}, -1, -1); !errors.Is(err, ErrInvalid) {
			t.Fatalf("file %q: %v, want ErrInvalid", bad, err)
		}
	}
	if tr.Exists("h") {
		t.Fatal("a refused restore made the group")
	}
}
