// Package checkpoint owns the layout of the gpuslice.io DRA driver's
// checkpoint: the claims prepared on this node, each with the step its
// Prepare or Unprepare reached, so that an agent restart neither loses a
// prepared claim (Unprepare still finds its group and CDI spec), nor prepares
// one twice, nor leaves what a half-done step made. The file is versioned and
// checksummed (SHA-256 of the data as stored, internal/statefile) and
// replaced atomically; a file that does not check out is refused
// (ErrCorrupt), never half read. The driver is its one writer.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	sigsjson "sigs.k8s.io/json"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/statefile"
)

// Version is the layout written; Versions are those read.
const Version = "v3"

// versionV2: no MIG instances (read as v3: the same fields less one).
const versionV2 = "v2"

// versionV1: claims without a state (v1 recorded completed Prepares only).
const versionV1 = "v1"

// Versions lists the layouts this package reads.
func Versions() []string { return []string{versionV1, versionV2, Version} }

// MaxBytes bounds the file read (a node prepares at most a few thousand claims).
const MaxBytes = 16 << 20

// ErrCorrupt is wrapped when the file is unreadable as a checkpoint: bad
// JSON, unknown version or state, checksum mismatch.
var ErrCorrupt = errors.New("corrupt DRA checkpoint")

// State is the step a claim's Prepare or Unprepare reached.
type State string

// The states, in the order a claim goes through them. The driver records
// PrepareStarted before it makes anything of a claim and PrepareCompleted
// once all is made; UnprepareStarted before it removes anything, and the
// entry goes once all is removed. A restarted driver undoes a claim found
// PrepareStarted and finishes one found UnprepareStarted.
const (
	PrepareStarted   State = "PrepareStarted"
	PrepareCompleted State = "PrepareCompleted"
	UnprepareStarted State = "UnprepareStarted"
)

func (s State) valid() bool {
	return s == PrepareStarted || s == PrepareCompleted || s == UnprepareStarted
}

// Device is one device allocated to a claim on this node.
type Device struct {
	// Request is the allocation result's request ("<request>" or
	// "<request>/<subrequest>" for a firstAvailable request).
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	ShareID string `json:"shareID,omitempty"`
	UUID    string `json:"uuid"`
	// Units and Memory are the capacity the claim consumes on the device
	// (0 and 0: the whole GPU).
	Units  int64 `json:"units,omitempty"`
	Memory int64 `json:"memory,omitempty"`
	// AdminAccess: the device is the claim's for monitoring (no group, no
	// gate, no limit).
	AdminAccess bool `json:"adminAccess,omitempty"`
	// MIG is the MIG instance the device is (nil: a whole GPU).
	MIG *MIG `json:"mig,omitempty"`
}

// MIG is a MIG instance a claim holds: where it is, whether it is made on
// demand (destroyed when no claim holds it any more) or the admin's, and,
// once made, its ids. Recorded PrepareStarted before it is made, so a
// restarted driver finds and destroys an instance a crash left unrecorded.
type MIG struct {
	GPU        int32  `json:"gpu"` // the parent GPU's index
	ParentUUID string `json:"parentUUID"`
	Profile    string `json:"profile"` // "3g.40gb"
	ProfileID  uint32 `json:"profileID"`
	Start      uint32 `json:"start"`
	Size       uint32 `json:"size"`
	// OnDemand: made for claims (by this claim or one before it that held
	// it); false: the admin's, never destroyed.
	OnDemand bool `json:"onDemand,omitempty"`
	// GI, CI and UUID once the instance is there ("" UUID: not yet).
	GI   uint32 `json:"gi,omitempty"`
	CI   uint32 `json:"ci,omitempty"`
	UUID string `json:"uuid,omitempty"`
}

// Claim is one claim of the node and the step it reached.
type Claim struct {
	State     State  `json:"state"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Group is the claim's group ("" for a claim of admin-access devices
	// only, which has none).
	Group     string   `json:"group"`
	CDIDevice string   `json:"cdiDevice"`
	Devices   []Device `json:"devices"`
}

// Data is the checkpoint's content: claims by claim UID.
type Data struct {
	Claims map[string]Claim `json:"claims"`
}

// v1 layout: no state, no admin access.
type deviceV1 struct {
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	ShareID string `json:"shareID,omitempty"`
	UUID    string `json:"uuid"`
	Units   int64  `json:"units,omitempty"`
	Memory  int64  `json:"memory,omitempty"`
}

type claimV1 struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Group     string     `json:"group"`
	CDIDevice string     `json:"cdiDevice"`
	Devices   []deviceV1 `json:"devices"`
}

type dataV1 struct {
	Claims map[string]claimV1 `json:"claims"`
}

// upgrade reads a v1 checkpoint: each of its claims was prepared.
func (d dataV1) upgrade() Data {
	out := Data{Claims: make(map[string]Claim, len(d.Claims))}
	for uid, c := range d.Claims {
		n := Claim{State: PrepareCompleted, Namespace: c.Namespace, Name: c.Name, Group: c.Group, CDIDevice: c.CDIDevice}
		for _, v := range c.Devices {
			n.Devices = append(n.Devices, Device{Request: v.Request, Pool: v.Pool, Device: v.Device, ShareID: v.ShareID,
				UUID: v.UUID, Units: v.Units, Memory: v.Memory})
		}
		out.Claims[uid] = n
	}
	return out
}

// Encode renders d as a checkpoint file.
func Encode(d Data) ([]byte, error) {
	if d.Claims == nil {
		d.Claims = map[string]Claim{}
	}
	for uid, c := range d.Claims {
		if !c.State.valid() {
			return nil, fmt.Errorf("DRA checkpoint: claim %s: state %q", uid, c.State)
		}
	}
	b, err := statefile.Encode(Version, d)
	if err != nil {
		return nil, fmt.Errorf("DRA checkpoint: %w", err)
	}
	return b, nil
}

// Decode reads a checkpoint file of any version in Versions: a matching
// checksum, strict JSON, a known state for every claim.
func Decode(b []byte) (Data, error) {
	var raw json.RawMessage
	v, err := statefile.Decode(b, Versions(), MaxBytes, &raw)
	if err != nil {
		return Data{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	var d Data
	if v == versionV1 { // v2 reads as v3: it lacks MIG alone
		var old dataV1
		err = strict(raw, &old)
		d = old.upgrade()
	} else {
		err = strict(raw, &d)
	}
	if err != nil {
		return Data{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if d.Claims == nil {
		d.Claims = map[string]Claim{}
	}
	for uid, c := range d.Claims {
		if !c.State.valid() {
			return Data{}, fmt.Errorf("%w: claim %s: state %q", ErrCorrupt, uid, c.State)
		}
	}
	return d, nil
}

func strict(b []byte, into any) error {
	errs, err := sigsjson.UnmarshalStrict(b, into, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	return errors.Join(append(errs, err)...)
}

// Load reads the checkpoint at path; a missing file is an empty checkpoint.
// The read is bounded: a regular file only, never through a symbolic link
// (its last component) and never blocking on a FIFO (group.OpenFile), at
// most MaxBytes (a larger file is refused, ErrCorrupt, and nothing more of it
// is read). A refused file is left as it is.
func Load(path string) (Data, error) {
	f, err := group.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return Data{Claims: map[string]Claim{}}, nil
	}
	if err != nil {
		return Data{}, fmt.Errorf("DRA checkpoint: %w", err)
	}
	b, rerr := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err := errors.Join(rerr, f.Close()); err != nil {
		return Data{}, fmt.Errorf("DRA checkpoint %s: %w", path, err)
	}
	if len(b) > MaxBytes {
		return Data{}, fmt.Errorf("%w: %s is over %d bytes", ErrCorrupt, path, MaxBytes)
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
