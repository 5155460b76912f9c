package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/group"
)

func sample() Data {
	return Data{Claims: map[string]Claim{
		"6f1c": {State: PrepareCompleted, Namespace: "ml", Name: "train-gpu", Group: "dra-6f1c", CDIDevice: "gpuslice.io/claim=6f1c",
			Devices: []Device{{Request: "gpu", Pool: "node-a", Device: "gpu-0", ShareID: "s1", UUID: "GPU-1", Units: 25, Memory: 4 << 30}}},
		"7a2d": {State: PrepareCompleted, Namespace: "ml", Name: "whole", Group: "dra-7a2d", CDIDevice: "gpuslice.io/claim=7a2d",
			Devices: []Device{{Request: "gpu", Pool: "node-a", Device: "gpu-1", UUID: "GPU-2"}}},
	}}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "checkpoint.json")
	d, err := Load(path)
	if err != nil || len(d.Claims) != 0 {
		t.Fatalf("missing file: %v, %v", d, err)
	}
	if err := Save(path, sample()); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sample()) {
		t.Fatalf("round trip: %+v", got)
	}
	// Reformatted by hand (indentation) still reads: the checksum is over the compacted data.
	b, _ := os.ReadFile(path)
	var ind bytes.Buffer
	if err := json.Indent(&ind, b, "", "  "); err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(ind.Bytes()); err != nil || !reflect.DeepEqual(got, sample()) {
		t.Fatalf("indented: %v", err)
	}
	// Saving again replaces, leaving no temporary file behind.
	s := sample()
	delete(s.Claims, "7a2d")
	if err := Save(path, s); err != nil {
		t.Fatal(err)
	}
	if got, _ := Load(path); len(got.Claims) != 1 {
		t.Fatalf("after delete: %v", got)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("files left: %v", ents)
	}
}

func TestCorruption(t *testing.T) {
	good, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	flip := bytes.Replace(good, []byte(`"units":25`), []byte(`"units":75`), 1)
	if bytes.Equal(flip, good) {
		t.Fatal("sample lacks the units field")
	}
	var e struct{ Checksum string }
	_ = json.Unmarshal(good, &e)
	for name, b := range map[string][]byte{
		"data changed":  flip,
		"truncated":     good[:len(good)/2],
		"empty":         {},
		"version":       bytes.Replace(good, []byte(`"version":"v3"`), []byte(`"version":"v9"`), 1),
		"no checksum":   bytes.Replace(good, []byte(`"checksum":"`+e.Checksum+`"`), []byte(`"checksum":""`), 1),
		"unknown field": bytes.Replace(good, []byte(`{"version"`), []byte(`{"extra":1,"version"`), 1),
		"not JSON":      []byte("claims: []"),
		"too large":     make([]byte, MaxBytes+1),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode = %v, want ErrCorrupt", err)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	if err := os.WriteFile(path, flip, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load of a corrupt file = %v", err)
	}
}

// TestReadsV1: a checkpoint written by the v1 driver (testdata/v1.json, made
// by its Encode) still loads, each claim PrepareCompleted (v1 saved a claim
// once it was prepared), and is written back as the current version.
func TestReadsV1(t *testing.T) {
	b, err := os.ReadFile("testdata/v1.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d, sample()) {
		t.Fatalf("v1 read as %+v", d)
	}
	again, err := Encode(d)
	if err != nil || !bytes.Contains(again, []byte(`"version":"v3"`)) {
		t.Fatalf("re-encoded: %s %v", again, err)
	}
	// v1 had no state: a v1 file naming one is not a v1 file.
	bad := bytes.Replace(b, []byte(`"namespace":"ml","name":"whole"`), []byte(`"state":"PrepareStarted","namespace":"ml","name":"whole"`), 1)
	if _, err := Decode(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("v1 with a state field: %v", err)
	}
}

// TestReadsV2: a checkpoint written by the v2 driver (testdata/v2.json, made
// by main's Encode before MIG) loads as it was; a MIG instance round-trips.
func TestReadsV2(t *testing.T) {
	b, err := os.ReadFile("testdata/v2.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decode(b)
	if err != nil || !reflect.DeepEqual(d, sample()) {
		t.Fatalf("v2 read as %+v, %v", d, err)
	}
	c := d.Claims["6f1c"]
	c.Devices[0].MIG = &MIG{GPU: 0, ParentUUID: "GPU-1", Profile: "3g.40gb", ProfileID: 9, Start: 4, Size: 4, OnDemand: true, GI: 2, UUID: "MIG-1"}
	d.Claims["6f1c"] = c
	again, err := Encode(d)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(again)
	if err != nil || !reflect.DeepEqual(back, d) {
		t.Fatalf("MIG round trip: %+v, %v", back, err)
	}
}

// TestStates: every state round-trips; an unknown or missing one is refused
// on both sides.
func TestStates(t *testing.T) {
	for _, st := range []State{PrepareStarted, PrepareCompleted, UnprepareStarted} {
		d := sample()
		c := d.Claims["6f1c"]
		c.State = st
		d.Claims["6f1c"] = c
		b, err := Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := Decode(b); err != nil || got.Claims["6f1c"].State != st {
			t.Fatalf("%s: %+v %v", st, got, err)
		}
	}
	d := sample()
	c := d.Claims["6f1c"]
	c.State = "Prepared"
	d.Claims["6f1c"] = c
	if _, err := Encode(d); err == nil {
		t.Fatal("Encode took an unknown state")
	}
	good, _ := Encode(sample())
	var e struct {
		Data json.RawMessage
	}
	_ = json.Unmarshal(good, &e)
	for _, st := range []string{`"Prepared"`, `""`} {
		data := bytes.Replace(e.Data, []byte(`"PrepareCompleted"`), []byte(st), 1)
		b, _ := json.Marshal(map[string]any{"version": "v3", "checksum": sha(data), "data": json.RawMessage(data)})
		if _, err := Decode(b); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "state") {
			t.Fatalf("state %s: %v", st, err)
		}
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func FuzzDecode(f *testing.F) {
	good, _ := Encode(sample())
	f.Add(good)
	for _, old := range []string{"testdata/v1.json", "testdata/v2.json"} {
		if b, err := os.ReadFile(old); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		again, err := Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(again); err != nil {
			t.Fatalf("re-encoded checkpoint refused: %v", err)
		}
	})
}

// TestLoadBounded: Load reads at most MaxBytes of a regular file: a larger
// file, a symbolic link (even to a good checkpoint), a FIFO (without
// blocking) and a directory are refused with an error naming the path, and
// each is left as it was.
func TestLoadBounded(t *testing.T) {
	dir := t.TempDir()
	good, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "good.json")
	if err := os.WriteFile(target, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if d, err := Load(target); err != nil || len(d.Claims) != len(sample().Claims) {
		t.Fatalf("Load of a good file: %v %v", d, err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, append(good, make([]byte, MaxBytes)...), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.json")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir.json")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		path, frag string
		is         error
	}{
		"too large":     {big, "is over", ErrCorrupt},
		"symbolic link": {link, "symbolic link", group.ErrNotRegular},
		"FIFO":          {fifo, "not a regular file", group.ErrNotRegular},
		"directory":     {sub, "not a regular file", group.ErrNotRegular},
	} {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := Load(c.path); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.frag) {
					t.Fatalf("Load(%s) = %v, want %v naming the path and %q", name, err, c.is, c.frag)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Load(%s) blocked", name)
			}
		})
	}
	if b, err := os.ReadFile(target); err != nil || !bytes.Equal(b, good) {
		t.Fatalf("the link's target changed: %v", err)
	}
	if st, err := os.Stat(big); err != nil || st.Size() != int64(len(good)+MaxBytes) {
		t.Fatalf("the large file changed: %v", err)
	}
}

// FuzzLoad: whatever bytes the checkpoint file holds, Load answers with a
// checkpoint or an error wrapping ErrCorrupt (never a panic), and a
// checkpoint it loads saves and loads again unchanged.
func FuzzLoad(f *testing.F) {
	good, _ := Encode(sample())
	f.Add(good)
	f.Add([]byte(`{"version":"v2"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "checkpoint.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		d, err := Load(path)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if err := Save(path, d); err != nil {
			t.Fatal(err)
		}
		again, err := Load(path)
		if err != nil {
			t.Fatalf("a saved checkpoint refused: %v", err)
		}
		a, _ := Encode(d)
		b2, _ := Encode(again)
		if !bytes.Equal(a, b2) {
			t.Fatalf("saved and loaded again: %s, want %s", b2, a)
		}
	})
}
