// Package xidrecord owns the layout of the node's XID record,
// <run-dir>/xid-record.json: the critical XID each GPU reported since the
// node booted. A critical XID withdraws a GPU until it is reset, which takes
// a reboot or an operator; a restarted agent cannot see the XID again, and a
// GPU that still answers NVML would look healthy. The record lets it keep
// the GPU withdrawn (and its DRA device tainted). It is kept with the node's
// boot ID: a record of an earlier boot is of GPUs reset since, and is
// ignored. The file is versioned and checksummed (internal/statefile) and
// replaced atomically; one that does not check out is refused (ErrCorrupt).
// The agent's health monitor is its one writer.
package xidrecord

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuslice/gpuslice/internal/statefile"
)

// Version is the layout written; Versions are those read.
const Version = "v1"

// Versions lists the layouts this package reads.
func Versions() []string { return []string{Version} }

// FileName is the record's name in the run directory.
const FileName = "xid-record.json"

// MaxBytes bounds the file read (a few lines per GPU).
const MaxBytes = 1 << 20

// ErrCorrupt is wrapped when the file is unreadable as a record.
var ErrCorrupt = errors.New("corrupt XID record")

// GPU is one GPU's first critical XID.
type GPU struct {
	XID    uint64 `json:"xid"`
	Reason string `json:"reason"` // as the health monitor gave it, with the time seen
}

// Data is the record: the boot it belongs to and the GPUs by UUID.
type Data struct {
	BootID string         `json:"bootID"`
	GPUs   map[string]GPU `json:"gpus"`
}

// Encode renders d as a record file.
func Encode(d Data) ([]byte, error) {
	if d.GPUs == nil {
		d.GPUs = map[string]GPU{}
	}
	b, err := statefile.Encode(Version, d)
	if err != nil {
		return nil, fmt.Errorf("XID record: %w", err)
	}
	return b, nil
}

// Decode reads a record file.
func Decode(b []byte) (Data, error) {
	var d Data
	if _, err := statefile.Decode(b, Versions(), MaxBytes, &d); err != nil {
		return Data{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if d.GPUs == nil {
		d.GPUs = map[string]GPU{}
	}
	return d, nil
}

// Load returns the GPUs the record at path holds for the boot bootID: none
// when the file is missing or of an earlier boot (stale tells which).
func Load(path, bootID string) (gpus map[string]GPU, stale bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]GPU{}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("XID record: %w", err)
	}
	d, err := Decode(b)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w (remove it to forget the XIDs it holds)", path, err)
	}
	if d.BootID != bootID {
		return map[string]GPU{}, true, nil
	}
	return d.GPUs, false, nil
}

// Save replaces the record at path atomically.
func Save(path string, d Data) error {
	b, err := Encode(d)
	if err != nil {
		return err
	}
	if err := statefile.Write(path, b); err != nil {
		return fmt.Errorf("XID record: %w", err)
	}
	return nil
}

// BootID reads the kernel's boot ID under procRoot (/proc: a new one each boot).
func BootID(procRoot string) (string, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "sys/kernel/random/boot_id"))
	if err != nil {
		return "", fmt.Errorf("boot ID: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", errors.New("boot ID: empty")
	}
	return id, nil
}
