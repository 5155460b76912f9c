package api

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseGPUs(t *testing.T) {
	ok := map[string][]GPUCount{
		"3":                       {{Count: 3}},
		"64":                      {{Count: 64}},
		`{"main":3}`:              {{Container: "main", Count: 3}},
		`{"main":3,"side":1}`:     {{Container: "main", Count: 3}, {Container: "side", Count: 1}},
		`{"b":1,"a-2":2,"c9":64}`: {{Container: "b", Count: 1}, {Container: "a-2", Count: 2}, {Container: "c9", Count: 64}},
	}
	for in, want := range ok {
		got, err := ParseGPUs(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseGPUs(%q) = %v, %v; want %v", in, got, err, want)
			continue
		}
		if back := FormatGPUs(got); back != in {
			t.Errorf("FormatGPUs(ParseGPUs(%q)) = %q", in, back)
		}
	}
	bad := map[string]string{
		"":                     "count",
		"0":                    "count",
		"65":                   "count",
		"-1":                   "count",
		"+2":                   "count",
		"03":                   "count",
		"1.5":                  "count",
		"three":                "count",
		"main=2":               "count",
		`{"main":}`:            "JSON",
		`{"":2}`:               "container name",
		`{"main":2,}`:          "JSON",
		`{"main":2,"main":1}`:  "named twice",
		`{"Main":2}`:           "container name",
		`{"main":"2"}`:         "count",
		`{"main":2.0}`:         "count",
		`{"main":2}{}`:         "trailing",
		`{}`:                   "no containers",
		`{"main":99999999999}`: "count",
		`{"main":2`:            "JSON",
		strings.Repeat("a", MaxGPUsAnnotationBytes+1): "limit",
	}
	for in, want := range bad {
		_, err := ParseGPUs(in)
		if !errors.Is(err, ErrInvalidGPUs) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseGPUs(%q) = %v, want an ErrInvalidGPUs saying %q", in, err, want)
		}
	}
}

// FuzzParseGPUs: never panics; what it accepts formats to a value that parses
// to the same counts, and is within bounds.
func FuzzParseGPUs(f *testing.F) {
	for _, s := range []string{"3", `{"main":3,"side":1}`, "0", `{"a":1,"a":2}`, `{"x":}`, "{", ",", `{"main":3,}`, "07", ` { "m" : 2 } `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseGPUs(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidGPUs) {
				t.Fatalf("error %v does not wrap ErrInvalidGPUs", err)
			}
			return
		}
		again, err := ParseGPUs(FormatGPUs(got))
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("accepted %q as %v; its formatted form %q gives %v, %v", s, got, FormatGPUs(got), again, err)
		}
		for _, c := range got {
			if c.Count < 1 || c.Count > MaxGPUsPerContainer || (len(got) > 1 && c.Container == "") {
				t.Fatalf("accepted %q as %v", s, got)
			}
		}
	})
}

func TestAppliedRoundTrip(t *testing.T) {
	a := Applied{Containers: []AppliedContainer{{Name: "side", GPUs: []int32{3, 1}}, {Name: "main"}}, Error: "x"}
	s, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":"v1","containers":[{"name":"main","gpus":[]},{"name":"side","gpus":[1,3]}],"error":"x"}`
	if s != want {
		t.Fatalf("Marshal = %s, want %s", s, want)
	}
	if !slices.Equal(a.Containers[0].GPUs, []int32{3, 1}) {
		t.Fatal("Marshal changed its receiver's slices")
	}
	got, err := ParseApplied(s)
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := got.GPUsOf("side"); !ok || !slices.Equal(g, []int32{1, 3}) {
		t.Fatalf("GPUsOf(side) = %v, %v", g, ok)
	}
	if _, ok := got.GPUsOf("other"); ok {
		t.Fatal("GPUsOf names a container the report does not")
	}
}

func TestParseAppliedErrors(t *testing.T) {
	ok := `{"version":"v1","containers":[{"name":"main","gpus":[0,2]}]}`
	if _, err := ParseApplied(ok); err != nil {
		t.Fatalf("baseline: %v", err)
	}
	cases := map[string]string{
		"":                                     "EOF",
		"x":                                    "invalid character",
		strings.Replace(ok, `"v1"`, `"v2"`, 1): `version "v2"`,
		`{"containers":[]}`:                    `version ""`,
		`{"version":"v1"}`:                     "containers missing",
		`{"version":"v1","containers":null}`:   "containers missing",
		strings.Replace(ok, `"gpus"`, `"gpu"`, 1): "unknown field",
		ok + `{}`:                                "trailing data",
		strings.Replace(ok, `[0,2]`, `[0,0]`, 1): "repeated",
		strings.Replace(ok, `[0,2]`, `[-1]`, 1):  "negative",
		strings.Replace(ok, `[0,2]`, `null`, 1):  "gpus missing",
		strings.Replace(ok, `"main"`, `""`, 1):   "name",
		`{"version":"v1","containers":[{"name":"a","gpus":[]},{"name":"a","gpus":[]}]}`: "duplicate",
		`"` + strings.Repeat("a", MaxAppliedBytes) + `"`:                                "limit",
	}
	for in, want := range cases {
		_, err := ParseApplied(in)
		if !errors.Is(err, ErrInvalidApplied) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseApplied(%.60q) = %v, want an ErrInvalidApplied saying %q", in, err, want)
		}
	}
	if _, err := (Applied{Containers: []AppliedContainer{{Name: "Bad_Name"}}}).Marshal(); !errors.Is(err, ErrInvalidApplied) {
		t.Fatalf("Marshal of a bad name: %v", err)
	}
}

// FuzzParseApplied: never panics; whatever it accepts survives a
// Marshal/Parse round trip, and Marshal is canonical.
func FuzzParseApplied(f *testing.F) {
	f.Add(`{"version":"v1","containers":[{"name":"main","gpus":[0,2]}]}`)
	f.Add(`{"version":"v1","containers":[],"error":"boom"}`)
	f.Add(`{"version":"v1","containers":[{"name":"b","gpus":[3,1]},{"name":"a","gpus":[]}]}`)
	f.Add(`{"version":"v1"}`)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseApplied(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidApplied) {
				t.Fatalf("error %v does not wrap ErrInvalidApplied", err)
			}
			return
		}
		out, err := a.Marshal()
		if err != nil {
			t.Fatalf("accepted %q but cannot marshal: %v", s, err)
		}
		again, err := ParseApplied(out)
		if err != nil {
			t.Fatalf("round trip of %q: %v", out, err)
		}
		if out2, _ := again.Marshal(); out2 != out {
			t.Fatalf("round trip changed %s -> %s", out, out2)
		}
	})
}
