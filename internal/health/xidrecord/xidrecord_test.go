package xidrecord

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func sample() Data {
	return Data{BootID: "boot-1", GPUs: map[string]GPU{
		"GPU-a": {XID: 48, Reason: "XID 48 (double-bit ECC error) at 2026-11-27T03:00:00Z"},
		"GPU-b": {XID: 79, Reason: "XID 79 (GPU has fallen off the bus) at 2026-11-27T03:01:00Z"},
	}}
}

func TestLoadSave(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", FileName)
	if g, stale, err := Load(path, "boot-1"); err != nil || stale || len(g) != 0 {
		t.Fatalf("missing file: %v %v %v", g, stale, err)
	}
	if err := Save(path, sample()); err != nil {
		t.Fatal(err)
	}
	g, stale, err := Load(path, "boot-1")
	if err != nil || stale || !reflect.DeepEqual(g, sample().GPUs) {
		t.Fatalf("same boot: %+v %v %v", g, stale, err)
	}
	// Rebooted: the GPUs were reset, the record is of no GPU now.
	if g, stale, err := Load(path, "boot-2"); err != nil || !stale || len(g) != 0 {
		t.Fatalf("other boot: %+v %v %v", g, stale, err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("record file: %v %v", st, err)
	}
}

func TestCorrupt(t *testing.T) {
	good, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"data changed": bytes.Replace(good, []byte(`"xid":48`), []byte(`"xid":13`), 1),
		"truncated":    good[:len(good)-3],
		"version":      bytes.Replace(good, []byte(`"version":"v1"`), []byte(`"version":"v0"`), 1),
		"too large":    make([]byte, MaxBytes+1),
	} {
		t.Run(name, func(t *testing.T) {
			if bytes.Equal(b, good) {
				t.Fatal("the corruption changed nothing")
			}
			path := filepath.Join(t.TempDir(), FileName)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, _, err := Load(path, "boot-1"); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Load = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestBootID(t *testing.T) {
	proc := t.TempDir()
	if _, err := BootID(proc); err == nil {
		t.Fatal("no boot_id file: no error")
	}
	if err := os.MkdirAll(filepath.Join(proc, "sys/kernel/random"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "sys/kernel/random/boot_id"), []byte("b7e1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, err := BootID(proc); err != nil || id != "b7e1" {
		t.Fatalf("BootID = %q, %v", id, err)
	}
	if id, err := BootID("/proc"); err != nil || id == "" {
		t.Fatalf("this machine's boot ID: %q, %v", id, err)
	}
}

func FuzzDecode(f *testing.F) {
	good, _ := Encode(sample())
	f.Add(good)
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
			t.Fatalf("re-encoded record refused: %v", err)
		}
	})
}
