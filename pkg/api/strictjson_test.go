package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeStrict(t *testing.T) {
	type obj struct {
		A int    `json:"a"`
		B string `json:"b,omitempty"`
	}
	var o obj
	if err := decodeStrict(` {"a":1,"b":"x"} `, 64, &o); err != nil || o != (obj{1, "x"}) {
		t.Fatalf("%+v %v", o, err)
	}
	for name, in := range map[string]string{
		"unknown field":   `{"a":1,"c":2}`,
		"duplicate field": `{"a":1,"a":2}`,
		"case mismatch":   `{"A":1}`,
		"trailing object": `{"a":1}{"a":2}`,
		"trailing junk":   `{"a":1} x`,
		"too big":         `{"a":1,"b":"` + strings.Repeat("x", 64) + `"}`,
		"empty":           ``,
		"wrong type":      `{"a":"1"}`,
	} {
		t.Run(name, func(t *testing.T) {
			var o obj
			if err := decodeStrict(in, 64, &o); err == nil {
				t.Fatalf("%q accepted as %+v", in, o)
			}
		})
	}
}

func TestDecodeContainerObject(t *testing.T) {
	var names []string
	if err := decodeContainerObject(`{"b":1,"a":[2]}`, func(n, raw string) error { names = append(names, n+"="+raw); return nil }); err != nil || !reflect.DeepEqual(names, []string{"b=1", "a=[2]"}) {
		t.Fatalf("%v %v", names, err)
	}
	for _, in := range []string{`{"a":1,"a":2}`, `{}`, `{"a":1} 1`, `[1]`, `{"a":}`, `{"a":1`} {
		if err := decodeContainerObject(in, func(string, string) error { return nil }); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// FuzzDecodeStrict: whatever the input, decodeStrict never panics; what it
// accepts is within the limit, re-encodes to an equal value, and is refused
// with anything appended.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{`{"version":"v1","node":"n","containers":[]}`, `{"a":1}`, `{"version":"v1","version":"v1"}`, `{} {}`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var a Assignment
		if err := decodeStrict(s, MaxAssignmentBytes, &a); err != nil {
			return
		}
		if len(s) > MaxAssignmentBytes {
			t.Fatalf("%d bytes accepted past the limit", len(s))
		}
		b, err := json.Marshal(&a)
		if err != nil {
			t.Fatal(err)
		}
		var again Assignment
		if err := decodeStrict(string(b), 1<<20, &again); err != nil || !reflect.DeepEqual(a, again) {
			t.Fatalf("re-decode of %s: %+v %v", b, again, err)
		}
		var tail Assignment
		if decodeStrict(s+" x", 1<<20, &tail) == nil || decodeStrict(s+"{}", 1<<20, &tail) == nil {
			t.Fatalf("%q accepted with trailing data", s)
		}
	})
}
