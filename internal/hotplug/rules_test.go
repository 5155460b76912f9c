package hotplug

import (
	"errors"
	"strings"
	"testing"

	devconfig "github.com/opencontainers/cgroups/devices/config"
)

func TestParseDevicesList(t *testing.T) {
	cases := []struct {
		in       string
		want     string // ruleList of the result
		allowAll bool
		err      bool
	}{
		{"", "", false, false},
		{"c 1:3 rwm\nc *:* m\nb *:* m\nc 195:0 rw\n", "allow c 1:3 rwm\nallow c *:* m\nallow b *:* m\nallow c 195:0 rw\n", false, false},
		{"a *:* rwm\n", "", true, false},
		{"c 4294967294:0 r\n", "allow c 4294967294:0 r\n", false, false},
		{"a *:* rwm\nc 1:3 rwm\n", "", false, true},
		{"c 1:3 rwm\na *:* rwm\n", "", false, true},
		{"a *:* rw\n", "", false, true},
		{"c 1:3 rwm\n\n", "", false, true},
		{"c  1:3 rwm\n", "", false, true},
		{"c 1:3 wr\n", "", false, true},
		{"c 1:3 rrw\n", "", false, true},
		{"c 1:3 \n", "", false, true},
		{"x 1:3 rwm\n", "", false, true},
		{"p 1:3 rwm\n", "", false, true},
		{"cc 1:3 rwm\n", "", false, true},
		{"c 1-3 rwm\n", "", false, true},
		{"c 4294967295:0 r\n", "", false, true},
		{"c -1:0 r\n", "", false, true},
		{"c 01:0 r\n", "", false, true},
		{"c 1:3 rwm x\n", "", false, true},
	}
	for _, tc := range cases {
		rules, all, err := ParseDevicesList(tc.in)
		if (err != nil) != tc.err || all != tc.allowAll || ruleList(rules) != tc.want {
			t.Errorf("%q: %q all=%v err=%v; want %q all=%v error=%v", tc.in, ruleList(rules), all, err, tc.want, tc.allowAll, tc.err)
		}
		if err != nil && !errors.Is(err, ErrInvalidRule) {
			t.Errorf("%q: %v does not wrap ErrInvalidRule", tc.in, err)
		}
	}
}

func TestAllowsAll(t *testing.T) {
	cases := []struct {
		rules []string
		want  bool
	}{
		{nil, false},
		{[]string{"deny a", "allow c 1:3 rwm"}, false},
		{[]string{"allow a"}, true},
		{[]string{"deny a", "allow a", "deny c 195:0 rw"}, true},
		{[]string{"allow a", "deny a", "allow c *:* rwm"}, false},
	}
	for _, tc := range cases {
		if got := AllowsAll(rulesOf(t, tc.rules...)); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.rules, got, tc.want)
		}
	}
}

func TestTarget(t *testing.T) {
	nodes := gpuNodes(3)
	base := rulesOf(t, "deny a", "allow c 1:3 rwm", "allow c 195:0 rw")
	got := ruleList(Target(base, nodes, wantSet("/dev/nvidia2", "/dev/nvidia0")))
	want := "deny a *:* rwm\nallow c 1:3 rwm\nallow c 195:0 rw\n" +
		"deny c 195:0 rw\ndeny c 195:1 rw\ndeny c 195:2 rw\n" +
		"allow c 195:0 rw\nallow c 195:2 rw\n"
	if got != want {
		t.Fatalf("Target:\n%s\nwant:\n%s", got, want)
	}
	if got := Target(nil, nil, nil); len(got) != 0 {
		t.Fatalf("empty target %q", ruleList(got))
	}
}

func TestCheckRule(t *testing.T) {
	ok := []devconfig.Rule{
		{Type: 'c', Major: 195, Minor: 0, Permissions: "rw"},
		{Type: 'a', Major: -1, Minor: -1, Permissions: "rwm"},
		{Type: 'b', Major: -1, Minor: 4294967294, Permissions: "m"},
	}
	bad := []devconfig.Rule{
		{Type: 'p', Major: 1, Minor: 1, Permissions: "rw"},
		{Type: 'c', Major: -2, Minor: 0, Permissions: "rw"},
		{Type: 'c', Major: 1, Minor: 4294967295, Permissions: "rw"},
		{Type: 'c', Major: 1, Minor: 1, Permissions: ""},
		{Type: 'c', Major: 1, Minor: 1, Permissions: "wr"},
		{Type: 'c', Major: 1, Minor: 1, Permissions: "rx"},
	}
	for _, r := range ok {
		if err := CheckRule(r); err != nil {
			t.Errorf("%s: %v", r.CgroupString(), err)
		}
	}
	for _, r := range bad {
		if err := CheckRule(r); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("%s: err = %v", r.CgroupString(), err)
		}
	}
}

// devices.list comes from the kernel, but is parsed strictly: whatever it
// holds gives rules that pass CheckRule and print back as the same lines.
func FuzzParseDevicesList(f *testing.F) {
	for _, s := range []string{"", "a *:* rwm\n", "c 1:3 rwm\nc *:* m\nb 8:* r\n", "c 195:0 rw\n", "c 1:3 rwm\na *:* rwm\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rules, all, err := ParseDevicesList(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidRule) {
				t.Fatalf("%q: %v does not wrap ErrInvalidRule", s, err)
			}
			return
		}
		if all && len(rules) != 0 {
			t.Fatalf("%q: allow-all with rules", s)
		}
		var b strings.Builder
		for _, r := range rules {
			if err := CheckRule(*r); err != nil || !r.Allow {
				t.Fatalf("%q: rule %s: %v", s, r.CgroupString(), err)
			}
			b.WriteString(r.CgroupString() + "\n")
		}
		if !all && b.String() != s && b.String() != s+"\n" {
			t.Fatalf("%q printed back as %q", s, b.String())
		}
	})
}
