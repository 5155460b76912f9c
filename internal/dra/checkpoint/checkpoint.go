// Package checkpoint owns the layout of the gpuslice.io DRA driver's
// checkpoint: the claims prepared on this node, so that an agent restart
// neither loses a prepared claim (Unprepare still finds its group and CDI
// spec) nor prepares one twice. The file is versioned and checksummed
// (SHA-256 of the data as stored) and replaced atomically; a file that does
// not check out is refused (ErrCorrupt), never half read. The driver is its
// one writer.
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	sigsjson "sigs.k8s.io/json"
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

type envelope struct {
	Version  string          `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Encode renders d as a checkpoint file.
func Encode(d Data) ([]byte, error) {
	if d.Claims == nil {
		d.Claims = map[string]Claim{}
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("DRA checkpoint: %w", err)
	}
	return json.Marshal(envelope{Version: Version, Checksum: sum(raw), Data: raw})
}

// Decode reads a checkpoint file: a known version, a matching checksum,
// strict JSON.
func Decode(b []byte) (Data, error) {
	var e envelope
	if len(b) > MaxBytes {
		return Data{}, fmt.Errorf("%w: %d bytes, limit %d", ErrCorrupt, len(b), MaxBytes)
	}
	if err := strict(b, &e); err != nil {
		return Data{}, err
	}
	if !slices.Contains(Versions(), e.Version) {
		return Data{}, fmt.Errorf("%w: version %q, this agent reads %v", ErrCorrupt, e.Version, Versions())
	}
	// The checksum is over the data exactly as stored (compacted, in case a
	// person reformatted the file).
	var c bytes.Buffer
	if err := json.Compact(&c, e.Data); err != nil || sum(c.Bytes()) != e.Checksum {
		return Data{}, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	var d Data
	if err := strict(e.Data, &d); err != nil {
		return Data{}, err
	}
	if d.Claims == nil {
		d.Claims = map[string]Claim{}
	}
	return d, nil
}

func strict(b []byte, into any) error {
	errs, err := sigsjson.UnmarshalStrict(b, into, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrCorrupt, errors.Join(errs...))
	}
	return nil
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

// Save replaces the checkpoint at path atomically (write, fsync, rename,
// fsync the directory): a crash leaves the old file or the new one.
func Save(path string, d Data) error {
	b, err := Encode(d)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("DRA checkpoint: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("DRA checkpoint: %w", err)
	}
	_, werr := tmp.Write(b)
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		return errors.Join(fmt.Errorf("DRA checkpoint: %w", err), os.Remove(tmp.Name()))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return errors.Join(fmt.Errorf("DRA checkpoint: %w", err), os.Remove(tmp.Name()))
	}
	if d, err := os.Open(dir); err == nil {
		err = errors.Join(d.Sync(), d.Close())
		if err != nil {
			return fmt.Errorf("DRA checkpoint: sync %s: %w", dir, err)
		}
	}
	return nil
}
