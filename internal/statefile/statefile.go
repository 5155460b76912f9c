// Package statefile owns the envelope of gpuslice's versioned, checksummed
// node state files (the DRA checkpoint, the remembered GPU health):
// {"version":"<v>","checksum":"<hex SHA-256 of the compacted data>","data":{...}},
// read strictly (no unknown or duplicate field), written atomically. Each
// file's own package defines its data and versions; this one only seals and
// opens them. Written here because none of the libraries in use offers a
// checksummed file (the kubelet's checkpointmanager is not a published module).
package statefile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	sigsjson "sigs.k8s.io/json"
)

// ErrCorrupt is wrapped when bytes are not a valid state file: too large,
// bad JSON, an unknown version, a checksum mismatch.
var ErrCorrupt = errors.New("corrupt state file")

type envelope struct {
	Version  string          `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Encode seals data (marshalled to JSON) as a file of this version.
func Encode(version string, data any) ([]byte, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	return json.Marshal(envelope{Version: version, Checksum: sum(raw), Data: raw})
}

// Decode opens a state file of at most maxBytes in one of versions into
// into (strict JSON) and returns its version. The checksum is over the data
// compacted, so a file a person reformatted still reads.
func Decode(b []byte, versions []string, maxBytes int, into any) (string, error) {
	if len(b) > maxBytes {
		return "", fmt.Errorf("%w: %d bytes, limit %d", ErrCorrupt, len(b), maxBytes)
	}
	var e envelope
	if err := strict(b, &e); err != nil {
		return "", err
	}
	if !slices.Contains(versions, e.Version) {
		return "", fmt.Errorf("%w: version %q, this agent reads %v", ErrCorrupt, e.Version, versions)
	}
	var c bytes.Buffer
	if err := json.Compact(&c, e.Data); err != nil || sum(c.Bytes()) != e.Checksum {
		return "", fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	if err := strict(e.Data, into); err != nil {
		return "", err
	}
	return e.Version, nil
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

// Write replaces the file at path atomically (write beside, fsync, rename,
// fsync the directory): a crash leaves the old content or the new, never a
// mix. The directory is made if missing (mode 0750); the file is 0600.
func Write(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		return errors.Join(err, os.Remove(tmp.Name()))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return errors.Join(err, os.Remove(tmp.Name()))
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil // renamed; a directory we cannot open cannot be synced either
	}
	if err := errors.Join(d.Sync(), d.Close()); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
