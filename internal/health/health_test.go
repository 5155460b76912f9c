package health

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestCritical(t *testing.T) {
	for _, tc := range []struct {
		xid  uint64
		skip []uint64
		want bool
	}{
		{13, nil, false}, {31, nil, false}, {43, nil, false}, {45, nil, false}, {68, nil, false}, {109, nil, false},
		{48, nil, true}, {79, nil, true}, {94, nil, true}, {0, nil, true}, {1 << 40, nil, true},
		{79, []uint64{79}, false}, {48, []uint64{79}, true}, {13, []uint64{79}, false},
	} {
		if got := Critical(tc.xid, tc.skip); got != tc.want {
			t.Errorf("Critical(%d, %v) = %v, want %v", tc.xid, tc.skip, got, tc.want)
		}
	}
	if d := Describe(79); d != "XID 79 (GPU has fallen off the bus)" {
		t.Errorf("Describe(79) = %q", d)
	}
	if d := Describe(7); d != "XID 7" {
		t.Errorf("Describe(7) = %q", d)
	}
}

// step is one input to the tracker and the statuses it must leave.
type step struct {
	name    string
	do      func(*Tracker) []Change
	changed []string          // UUIDs reported changed, in order
	want    map[string]string // UUID -> "" healthy, else a substring of the reason
	cause   map[string]Cause
}

// trackerCase is a tracker of GPUs a and b and the steps it goes through.
type trackerCase struct {
	name  string
	skip  []uint64
	steps []step
}

func trackerCases() []trackerCase {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	failed := errors.New("GPU is lost")
	return []trackerCase{
		{name: "application XIDs change nothing", steps: []step{
			{"xid 13", func(t *Tracker) []Change { return t.XID("a", 13, at) }, nil, map[string]string{"a": "", "b": ""}, nil},
			{"xid 109 on any", func(t *Tracker) []Change { return t.XID("", 109, at) }, nil, map[string]string{"a": "", "b": ""}, nil},
		}},
		{name: "critical XID is sticky and first one reported", steps: []step{
			{"xid 79", func(t *Tracker) []Change { return t.XID("b", 79, at) }, []string{"b"},
				map[string]string{"a": "", "b": "XID 79 (GPU has fallen off the bus) at 2026-01-02T03:04:05Z"}, map[string]Cause{"b": CauseXID}},
			{"xid 48 after", func(t *Tracker) []Change { return t.XID("b", 48, at) }, nil, map[string]string{"b": "XID 79"}, nil},
			{"queries succeed", func(t *Tracker) []Change { return t.Query("b", nil) }, nil, map[string]string{"b": "XID 79"}, nil},
			{"wait ok", func(t *Tracker) []Change { return t.Wait(nil) }, nil, map[string]string{"a": "", "b": "XID 79"}, nil},
		}},
		{name: "skipped XID", skip: []uint64{79}, steps: []step{
			{"xid 79 skipped", func(t *Tracker) []Change { return t.XID("a", 79, at) }, nil, map[string]string{"a": ""}, nil},
			{"xid 94", func(t *Tracker) []Change { return t.XID("a", 94, at) }, []string{"a"}, map[string]string{"a": "XID 94"}, nil},
		}},
		{name: "XID on an unnamed GPU marks all", steps: []step{
			{"xid 48 unnamed", func(t *Tracker) []Change { return t.XID("", 48, at) }, []string{"a", "b"},
				map[string]string{"a": "could not name", "b": "could not name"}, nil},
		}},
		{name: "XID on a foreign GPU is ignored", steps: []step{
			{"xid 48 other", func(t *Tracker) []Change { return t.XID("zz", 48, at) }, nil, map[string]string{"a": "", "b": ""}, nil},
		}},
		{name: "failing queries come and go", steps: []step{
			{"fail", func(t *Tracker) []Change { return t.Query("a", failed) }, []string{"a"},
				map[string]string{"a": "NVML query failed: GPU is lost", "b": ""}, map[string]Cause{"a": CauseQuery}},
			{"fail again", func(t *Tracker) []Change { return t.Query("a", failed) }, nil, map[string]string{"a": "GPU is lost"}, nil},
			{"answers", func(t *Tracker) []Change { return t.Query("a", nil) }, []string{"a"}, map[string]string{"a": ""}, nil},
		}},
		{name: "XID wins over a failing query", steps: []step{
			{"fail", func(t *Tracker) []Change { return t.Query("a", failed) }, []string{"a"}, map[string]string{"a": "query failed"}, nil},
			{"xid", func(t *Tracker) []Change { return t.XID("a", 79, at) }, []string{"a"}, map[string]string{"a": "XID 79"}, map[string]Cause{"a": CauseXID}},
			{"answers", func(t *Tracker) []Change { return t.Query("a", nil) }, nil, map[string]string{"a": "XID 79"}, nil},
		}},
		{name: "registration and wait failures", steps: []step{
			{"register fails", func(t *Tracker) []Change { return t.Register("b", failed) }, []string{"b"},
				map[string]string{"a": "", "b": "event registration failed"}, map[string]Cause{"b": CauseEvents}},
			{"wait fails", func(t *Tracker) []Change { return t.Wait(failed) }, []string{"a"},
				map[string]string{"a": "waiting for NVML events failed", "b": "registration"}, nil},
			{"wait ok", func(t *Tracker) []Change { return t.Wait(nil) }, []string{"a"}, map[string]string{"a": "", "b": "registration"}, nil},
		}},
		{"restored XIDs", []uint64{94}, []step{
			{"skipped now", func(t *Tracker) []Change { return t.Restore("a", 94, "XID 94 at then") }, nil, map[string]string{"a": ""}, nil},
			{"application", func(t *Tracker) []Change { return t.Restore("a", 13, "") }, nil, map[string]string{"a": ""}, nil},
			{"not ours", func(t *Tracker) []Change { return t.Restore("zz", 48, "") }, nil, map[string]string{"a": "", "b": ""}, nil},
			{"xid 48", func(t *Tracker) []Change { return t.Restore("b", 48, "XID 48 (double-bit ECC error) at then") }, []string{"b"},
				map[string]string{"a": "", "b": "XID 48 (double-bit ECC error) at then"}, map[string]Cause{"b": CauseXID}},
			{"answers", func(t *Tracker) []Change { return t.Query("b", nil) }, nil, map[string]string{"b": "XID 48"}, nil},
			{"first stays", func(t *Tracker) []Change { return t.Restore("b", 79, "") }, nil, map[string]string{"b": "XID 48"}, nil},
			{"no reason", func(t *Tracker) []Change { return t.Restore("a", 62, "") }, []string{"a"}, map[string]string{"a": "XID 62 (internal"}, nil},
		}},
	}
}

// XIDs hands a restarted agent exactly what Restore takes back: the same
// statuses, the other causes left out.
func TestTrackerXIDsRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tr := NewTracker([]string{"a", "b", "c"}, nil)
	tr.XID("c", 79, at)
	tr.XID("a", 48, at)
	tr.Query("b", errors.New("GPU is lost"))
	got := tr.XIDs()
	if len(got) != 2 || got[0].UUID != "a" || got[0].XID != 48 || got[1].UUID != "c" || got[1].XID != 79 {
		t.Fatalf("XIDs = %+v, want a (48) and c (79)", got)
	}
	again := NewTracker([]string{"a", "b", "c"}, nil)
	for _, s := range got {
		again.Restore(s.UUID, s.XID, s.Reason)
	}
	for _, u := range []string{"a", "c"} {
		if again.Status(u) != tr.Status(u) {
			t.Errorf("%s restored as %+v, was %+v", u, again.Status(u), tr.Status(u))
		}
	}
	if !again.Status("b").Healthy {
		t.Error("a failing query was carried over: it is re-checked, not remembered")
	}
}

func TestTracker(t *testing.T) {
	for _, tc := range trackerCases() {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker([]string{"a", "b", "a"}, tc.skip)
			for _, s := range tc.steps {
				s.check(t, tr)
			}
			if n := len(tr.All()); n != 2 {
				t.Errorf("All lists %d GPUs, want 2", n)
			}
		})
	}
	if st := NewTracker(nil, nil).Status("x"); st.Healthy {
		t.Error("an unknown GPU is healthy")
	}
}

// check runs the step on tr and checks the changes and statuses it leaves.
func (s step) check(t *testing.T, tr *Tracker) {
	t.Helper()
	var got []string
	for _, c := range s.do(tr) {
		got = append(got, c.UUID)
	}
	if strings.Join(got, ",") != strings.Join(s.changed, ",") {
		t.Errorf("%s: changed %v, want %v", s.name, got, s.changed)
	}
	for uuid, want := range s.want {
		st := tr.Status(uuid)
		if want == "" && (!st.Healthy || st.Reason != "") || want != "" && (st.Healthy || !strings.Contains(st.Reason, want)) {
			t.Errorf("%s: %s = %+v, want %q", s.name, uuid, st, want)
		}
	}
	for uuid, c := range s.cause {
		if got := tr.Status(uuid).Cause; got != c {
			t.Errorf("%s: %s cause %q, want %q", s.name, uuid, got, c)
		}
	}
}

func TestParseXIDs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		bad  bool
	}{{"", "[]", false}, {"79", "[79]", false}, {" 48, 79 ,", "[48 79]", false}, {"x", "", true}, {"-1", "", true}, {"99999999999", "", true}} {
		got, err := ParseXIDs(tc.in)
		if (err != nil) != tc.bad || !tc.bad && fmt.Sprint(got) != tc.want && !(tc.want == "[]" && got == nil) {
			t.Errorf("ParseXIDs(%q) = %v, %v", tc.in, got, err)
		}
	}
}

// FuzzParseXIDs: any input parses or fails cleanly; what parses has one XID
// per non-empty field, each within 32 bits.
func FuzzParseXIDs(f *testing.F) {
	for _, s := range []string{"", "79", "48, 79,", "x", "-1", ",,,", "4294967296", " 13 ,109"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		xids, err := ParseXIDs(s)
		if err != nil {
			return
		}
		fields := 0
		for _, x := range strings.Split(s, ",") {
			if strings.TrimSpace(x) != "" {
				fields++
			}
		}
		if fields != len(xids) {
			t.Fatalf("ParseXIDs(%q) = %v from %d fields", s, xids, fields)
		}
		for _, x := range xids {
			if x > 1<<32-1 {
				t.Fatalf("ParseXIDs(%q): %d out of range", s, x)
			}
		}
	})
}

// TestLost: the first critical XID is kept with its number; only a GPU that
// fell off the bus (79) is lost, and a later XID does not change that.
func TestLost(t *testing.T) {
	at := time.Unix(1000, 0)
	tr := NewTracker([]string{"a", "b"}, nil)
	tr.XID("a", 48, at)
	tr.XID("b", 79, at)
	tr.XID("b", 48, at)
	for _, c := range []struct {
		uuid string
		xid  uint64
		lost bool
	}{{"a", 48, false}, {"b", 79, true}} {
		st := tr.Status(c.uuid)
		if st.Healthy || st.XID != c.xid || st.Lost() != c.lost {
			t.Errorf("%s: healthy %v, XID %d, lost %v; want unhealthy, XID %d, lost %v", c.uuid, st.Healthy, st.XID, st.Lost(), c.xid, c.lost)
		}
	}
	if st := NewTracker([]string{"c"}, nil).Status("c"); !st.Healthy || st.XID != 0 || st.Lost() {
		t.Errorf("healthy GPU: %+v lost %v", st, st.Lost())
	}
}
