package group

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A setting file over MaxFileSize is refused without reading it whole, and
// the error quotes nothing of it.
func TestReadTooLarge(t *testing.T) {
	tree := NewTree(t.TempDir())
	if err := tree.Create("g"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree.Path("g"), FileSlice), []byte(strings.Repeat("9", 8<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := tree.Read("g")
	if !errors.Is(err, ErrTooLarge) || len(err.Error()) > 300 {
		t.Fatalf("Read: %v", err)
	}
	if _, err := tree.ReadFile("g", FileSlice); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ReadFile: %v", err)
	}
}

// Values longer than MaxValueLen are refused before parsing; errors quote a
// short prefix of a bad value, never all of it.
func TestApplyBoundedQuote(t *testing.T) {
	for _, f := range SettingFiles() {
		for _, v := range []string{strings.Repeat("7", MaxFileSize), strings.Repeat("é", 40), "20ms\nhigh"} {
			var s Settings
			err := s.Apply(f, v)
			if !errors.Is(err, ErrInvalid) || len(err.Error()) > 200 {
				t.Errorf("Apply(%s, %d bytes): %v", f, len(v), err)
			}
		}
	}
	if q := Quote(strings.Repeat("x", 1000)); len(q) > 60 || !strings.Contains(q, "(1000 bytes)") {
		t.Errorf("Quote: %s", q)
	}
	if q := Quote("soon"); q != `"soon"` {
		t.Errorf("Quote: %s", q)
	}
}
