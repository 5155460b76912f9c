package proto

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// UUID is a GPU's 16-byte identity (cuDeviceGetUuid); NVML spells it
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
type UUID [16]byte

// String formats u the way NVML does.
func (u UUID) String() string {
	h := hex.EncodeToString(u[:])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// ParseUUID parses the NVML spelling (the "GPU-" prefix is optional; a
// MIG instance's "MIG-" prefix is read too: its 16 bytes are the
// instance's own, cuDeviceGetUuid_v2's).
func ParseUUID(s string) (UUID, error) {
	var u UUID
	t, mig := strings.CutPrefix(s, "MIG-")
	if !mig {
		t = strings.TrimPrefix(s, "GPU-")
	}
	parts := strings.Split(t, "-")
	if len(parts) != 5 || len(parts[0]) != 8 || len(parts[1]) != 4 || len(parts[2]) != 4 ||
		len(parts[3]) != 4 || len(parts[4]) != 12 {
		return u, fmt.Errorf("invalid GPU UUID %q: want GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", s)
	}
	if _, err := hex.Decode(u[:], []byte(strings.Join(parts, ""))); err != nil {
		return u, fmt.Errorf("invalid GPU UUID %q: %w", s, err)
	}
	return u, nil
}
