package gpucdi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// ClaimKind is the CDI kind of the DRA driver's per-claim specs: one spec per
// prepared ResourceClaim, one device in it named by the claim's UID, holding
// everything a container using the claim gets (the GPUs' nodes, the control
// devices, the library and /etc/ld.so.preload, the claim's group directory
// read-only with its state file, the daemon socket, the environment).
const ClaimKind = "gpuslice.io/claim"

// ClaimDevice is the fully qualified CDI device name of a claim.
func ClaimDevice(uid string) string { return ClaimKind + "=" + uid }

// claimSpecName is the spec's file name (without extension) of a claim.
func claimSpecName(uid string) string { return "gpuslice.io-claim_" + uid }

// ClaimSpec returns the CDI spec of claim uid: its devices (one at least)
// by name, each with its container edits (deviceplugin.Inject.Edits).
func ClaimSpec(uid string, devices map[string]specs.ContainerEdits) (*specs.Spec, error) {
	if err := parser.ValidateDeviceName(uid); err != nil {
		return nil, fmt.Errorf("claim %s: %w", uid, err)
	}
	if len(devices) == 0 {
		return nil, fmt.Errorf("claim %s: no device", uid)
	}
	s := &specs.Spec{Kind: ClaimKind}
	names := make([]string, 0, len(devices))
	for n := range devices {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := parser.ValidateDeviceName(n); err != nil {
			return nil, fmt.Errorf("claim %s: %w", uid, err)
		}
		s.Devices = append(s.Devices, specs.Device{Name: n, ContainerEdits: devices[n]})
	}
	v, err := specs.MinimumRequiredVersion(s)
	if err != nil {
		return nil, fmt.Errorf("CDI spec version: %w", err)
	}
	s.Version = v
	return s, nil
}

// WriteClaim validates a claim's spec with the CDI library and writes it
// into dir (created if missing), replacing an older one atomically.
func WriteClaim(dir, uid string, spec *specs.Spec) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("CDI spec dir: %w", err)
	}
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil && c == nil {
		return fmt.Errorf("CDI cache: %w", err)
	}
	if err := c.WriteSpec(spec, claimSpecName(uid)+".json"); err != nil {
		return fmt.Errorf("write CDI spec of claim %s: %w", uid, err)
	}
	return nil
}

// ClaimSpecs lists the claim UIDs of the claim specs in dir (written by
// WriteClaim; a missing dir holds none).
func ClaimSpecs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("CDI spec dir: %w", err)
	}
	var uids []string
	for _, e := range ents {
		name := e.Name()
		for _, ext := range []string{".json", ".yaml"} {
			if uid, ok := strings.CutSuffix(strings.TrimPrefix(name, claimSpecName("")), ext); ok &&
				strings.HasPrefix(name, claimSpecName("")) && uid != "" && !slices.Contains(uids, uid) {
				uids = append(uids, uid)
			}
		}
	}
	return uids, nil
}

// RemoveClaim removes a claim's spec (none: not an error).
func RemoveClaim(dir, uid string) error {
	var errs []error
	for _, ext := range []string{".json", ".yaml"} {
		if err := os.Remove(filepath.Join(dir, claimSpecName(uid)+ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
