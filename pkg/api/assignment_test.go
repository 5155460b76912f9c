package api

import (
	"errors"
	"strings"
	"testing"
)

func validAssignment() *Assignment {
	return &Assignment{Version: AssignmentVersion, Node: "n1", Containers: []ContainerAssignment{
		{Name: "main", GPUs: []GPUAssignment{{Index: 0, UUID: "GPU-a", Units: 50, MemoryBytes: 1 << 30}}},
		{Name: "side", GPUs: []GPUAssignment{{Index: 0, UUID: "GPU-a", Units: 10}, {Index: 1, UUID: "GPU-b", Units: 100, MemoryBytes: 8 << 30, Exclusive: true}}},
	}}
}

func TestAssignmentRoundTrip(t *testing.T) {
	a := validAssignment()
	b, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseAssignment(string(b))
	if err != nil {
		t.Fatalf("parse %s: %v", b, err)
	}
	tot := got.Totals()
	if tot[0].Units != 60 || tot[0].MemoryBytes != 1<<30 || tot[0].Exclusive || !tot[1].Exclusive || len(tot) != 2 {
		t.Fatalf("totals = %+v", tot)
	}
}

func TestParseAssignmentErrors(t *testing.T) {
	ok := `{"version":"v1","node":"n","containers":[{"name":"c","gpus":[{"index":0,"uuid":"u","units":1,"memoryBytes":0}]}]}`
	if _, err := ParseAssignment(ok); err != nil {
		t.Fatalf("baseline: %v", err)
	}
	cases := map[string]struct{ in, want string }{
		"empty":          {"", "EOF"},
		"not json":       {"gpu0", "invalid character"},
		"wrong version":  {strings.Replace(ok, `"v1"`, `"v2"`, 1), `version "v2"`},
		"no version":     {strings.Replace(ok, `"version":"v1",`, ``, 1), `version ""`},
		"unknown field":  {strings.Replace(ok, `"node"`, `"extra":1,"node"`, 1), "unknown field"},
		"trailing":       {ok + `{}`, "trailing data"},
		"no node":        {strings.Replace(ok, `"node":"n"`, `"node":""`, 1), "node is empty"},
		"no containers":  {`{"version":"v1","node":"n","containers":[]}`, "no containers"},
		"dup container":  {strings.Replace(ok, `}]}]}`, `}]},{"name":"c","gpus":[{"index":0,"uuid":"u","units":1,"memoryBytes":0}]}]}`, 1), "duplicate name"},
		"no gpus":        {`{"version":"v1","node":"n","containers":[{"name":"c","gpus":[]}]}`, "no gpus"},
		"negative index": {strings.Replace(ok, `"index":0`, `"index":-1`, 1), "negative"},
		"zero share":     {strings.Replace(ok, `"units":1`, `"units":0`, 1), "neither units nor memory"},
		"negative units": {strings.Replace(ok, `"units":1`, `"units":-1`, 1), "negative units"},
		"no uuid":        {strings.Replace(ok, `"uuid":"u"`, `"uuid":""`, 1), "uuid is empty"},
		"wrong type":     {strings.Replace(ok, `"units":1`, `"units":"1"`, 1), "cannot unmarshal"},
		"too big":        {strings.Repeat(" ", MaxAssignmentBytes+1), "limit"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseAssignment(tc.in)
			if !errors.Is(err, ErrInvalidAssignment) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidAssignment containing %q", err, tc.want)
			}
		})
	}
}

func TestMarshalRejectsInvalid(t *testing.T) {
	a := validAssignment()
	a.Version = ""
	if _, err := a.Marshal(); !errors.Is(err, ErrInvalidAssignment) {
		t.Fatalf("err = %v", err)
	}
}

// FuzzParseAssignment: the parser never panics, and whatever it accepts
// survives a Marshal/Parse round trip unchanged.
func FuzzParseAssignment(f *testing.F) {
	b, _ := validAssignment().Marshal()
	f.Add(string(b))
	f.Add(`{"version":"v1","node":"n","containers":[{"name":"c","gpus":[{"index":0,"uuid":"u","units":1,"memoryBytes":0}]}]}`)
	f.Add(`{"version":"v1"}`)
	f.Add(`[]`)
	f.Add(`{"version":"v1","node":"n","containers":null}`)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAssignment(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidAssignment) {
				t.Fatalf("error %v does not wrap ErrInvalidAssignment", err)
			}
			return
		}
		out, err := a.Marshal()
		if err != nil {
			t.Fatalf("accepted %q but cannot marshal: %v", s, err)
		}
		again, err := ParseAssignment(string(out))
		if err != nil {
			t.Fatalf("round trip of %q: %v", out, err)
		}
		out2, _ := again.Marshal()
		if string(out) != string(out2) {
			t.Fatalf("round trip changed %s -> %s", out, out2)
		}
	})
}
