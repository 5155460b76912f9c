package devices

import (
	"errors"
	"testing"
)

func TestParseRule(t *testing.T) {
	cases := []struct {
		in    string
		allow bool
		want  Rule
		str   string
	}{
		{"c 195:0 rw", true, Rule{TypeChar, 195, 0, Read | Write, true}, "c 195:0 rw"},
		{"a *:* rwm", false, Rule{TypeAll, Wildcard, Wildcard, PermsAll, false}, "a *:* rwm"},
		{"a", true, Rule{TypeAll, Wildcard, Wildcard, PermsAll, true}, "a *:* rwm"},
		{"b 8:* m", true, Rule{TypeBlock, 8, Wildcard, Mknod, true}, "b 8:* m"},
		{"  c *:1   mwr ", true, Rule{TypeChar, Wildcard, 1, PermsAll, true}, "c *:1 rwm"},
		{"c 4294967294:0 r", true, Rule{TypeChar, 1<<32 - 2, 0, Read, true}, "c 4294967294:0 r"},
	}
	for _, tc := range cases {
		got, err := ParseRule(tc.in, tc.allow)
		if err != nil {
			t.Fatalf("ParseRule(%q): %v", tc.in, err)
		}
		if got != tc.want || got.String() != tc.str {
			t.Fatalf("ParseRule(%q) = %+v (%s), want %+v (%s)", tc.in, got, got, tc.want, tc.str)
		}
	}
}

func TestParseRuleErrors(t *testing.T) {
	for _, in := range []string{
		"", "c", "c 195:0", "x 1:2 r", "c 1 r", "c 1:2 rx", "c 1:2 rr", "c 1:2 ", "c -1:2 r",
		"c 1:4294967295 r", "c 1:99999999999 r", "cc 1:2 r", "c 1:2 r extra", "c :2 r", "c 1:2 \x00",
	} {
		if _, err := ParseRule(in, true); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("ParseRule(%q) err = %v, want ErrInvalidRule", in, err)
		}
	}
}

func TestMatches(t *testing.T) {
	gpu1 := Device{TypeChar, 195, 1}
	cases := []struct {
		r    string
		want bool
	}{
		{"c 195:1 r", true}, {"c 195:* r", true}, {"c *:1 r", true}, {"a *:* r", true},
		{"c 195:0 r", false}, {"b 195:1 r", false}, {"c 196:* r", false},
	}
	for _, tc := range cases {
		r, err := ParseRule(tc.r, true)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Matches(gpu1); got != tc.want {
			t.Errorf("%s matches %s = %v, want %v", tc.r, gpu1, got, tc.want)
		}
	}
}

// FuzzParseRule: never panics; what it accepts validates and reads back
// unchanged from its String form.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"c 195:0 rw", "a", "a *:* rwm", "b 8:* m", "c *:* m", "c 1:2 rx", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s, true)
		if err != nil {
			if !errors.Is(err, ErrInvalidRule) {
				t.Fatalf("error %v does not wrap ErrInvalidRule", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted %q but invalid: %v", s, err)
		}
		again, err := ParseRule(r.String(), true)
		if err != nil || again != r {
			t.Fatalf("round trip %q -> %q -> %+v, %v", s, r.String(), again, err)
		}
	})
}
