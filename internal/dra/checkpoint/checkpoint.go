// Package checkpoint owns the layout of the gpuslice.io DRA driver's
// checkpoint: the claims prepared on this node, so that an agent restart
// neither loses a prepared claim (Unprepare still finds its group and CDI
// spec) nor prepares one twice. The file is versioned and checksummed
// (SHA-256 of the data as stored, internal/statefile) and replaced atomically; a file that does
// not check out is refused (ErrCorrupt), never half read. The driver is its
// one writer.
package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/gpuslice/gpuslice/internal/statefile"
)

// Version is the layout written; Versions are those read.
const Version = "v1"

// Versions lists the layouts this package reads.
func Versions() []string { return []string{Version} }

// MaxBytes bounds the file read (a node prepares at most a few thousand claims).
const MaxBytes = 16 << 20

// ErrCorrupt is wrapped when the file is unreadable as a checkpoint: bad
// JSON, unknown version, checksum mismatch.
var ErrCorrupt = errors.New("corrupt DRA checkpoint")

// Device is one device allocated to a claim on this node.
type Device struct {
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	ShareID string `json:"shareID,omitempty"`
	UUID    string `json:"uuid"`
	// Units and Memory are the capacity the claim consumes on the device
	// (0 and 0: the whole GPU).
	Units  int64 `json:"units,omitempty"`
	Memory int64 `json:"memory,omitempty"`
}

// Claim is one prepared claim.
type Claim struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Group     string   `json:"group"`
	CDIDevice string   `json:"cdiDevice"`
	Devices   []Device `json:"devices"`
}

// Data is the checkpoint's content: prepared claims by claim UID.
type Data struct {
	Claims map[string]Claim `json:"claims"`
}

// Encode renders d as a checkpoint file.
func Encode(d Data) ([]byte, error) {
	if d.Claims == nil {
		d.Claims = map[string]Claim{}
	}
	b, err := statefile.Encode(Version, d)
	if err != nil {
		return nil, fmt.Errorf("DRA checkpoint: %w", err)
	}
	return b, nil
}

// Decode reads a checkpoint file: a known version, a matching checksum,
// strict JSON.
func Decode(b []byte) (Data, error) {
	var d Data
	if _, err := statefile.Decode(b, Versions(), MaxBytes, &d); err != nil {
		return Data{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if d.Claims == nil {
		d.Claims = map[string]Claim{}
	}
	return d, nil
}

// Load reads the checkpoint at path; a missing file is an empty checkpoint.
func Load(path string) (Data, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Data{Claims: map[string]Claim{}}, nil
	}
	if err != nil {
		return Data{}, fmt.Errorf("DRA checkpoint: %w", err)
	}
	d, err := Decode(b)
	if err != nil {
		return Data{}, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// Save replaces the checkpoint at path atomically (statefile.Write): a
// crash leaves the old file or the new one.
func Save(path string, d Data) error {
	b, err := Encode(d)
	if err != nil {
		return err
	}
	if err := statefile.Write(path, b); err != nil {
		return fmt.Errorf("DRA checkpoint: %w", err)
	}
	return nil
}
