package statefile

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

type data struct {
	N int    `json:"n"`
	S string `json:"s"`
}

func TestRoundTrip(t *testing.T) {
	b, err := Encode("v2", data{N: 7, S: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var ind bytes.Buffer
	if err := json.Indent(&ind, b, "", "  "); err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string][]byte{"as written": b, "reformatted": ind.Bytes()} {
		var d data
		v, err := Decode(in, []string{"v1", "v2"}, 1<<10, &d)
		if err != nil || v != "v2" || d != (data{N: 7, S: "x"}) {
			t.Errorf("%s: %q %+v %v", name, v, d, err)
		}
	}
	for name, vs := range map[string][]string{"unknown version": {"v1"}, "too large": {"v2"}} {
		limit := 1 << 10
		if name == "too large" {
			limit = len(b) - 1
		}
		var d data
		if _, err := Decode(b, vs, limit, &d); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	var other struct{ N int }
	if _, err := Decode(b, []string{"v2"}, 1<<10, &other); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a field the reader does not know: %v, want ErrCorrupt", err)
	}
}

func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "f.json")
	for _, content := range []string{"one", "two"} {
		if err := Write(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != content {
			t.Fatalf("read back %q, %v; want %q", b, err, content)
		}
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if st, err := os.Stat(path); len(ents) != 1 || err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("after two writes: %v files, %v %v", len(ents), st, err)
	}
}
