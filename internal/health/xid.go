// Package health decides which GPUs are healthy from NVML's XID events, the
// registration and waiting for those events, and failing device queries.
// Pure: no NVML, no clock of its own (times are passed in).
package health

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ApplicationXID tells whether an XID is one an application causes (a bad
// kernel, a page fault, a stopped or preempted context) and the GPU stays
// usable: 13, 31, 43, 45, 68 and 109, the set NVIDIA's device plugin skips.
func ApplicationXID(xid uint64) bool {
	switch xid {
	case 13, 31, 43, 45, 68, 109:
		return true
	}
	return false
}

// Critical tells whether an XID withdraws the GPU: every XID but the
// application ones and those in skip (the operator's additions).
func Critical(xid uint64, skip []uint64) bool {
	return !ApplicationXID(xid) && !slices.Contains(skip, xid)
}

// Describe names the XIDs an operator meets most, for messages.
func Describe(xid uint64) string {
	name := ""
	switch xid {
	case 48:
		name = "double-bit ECC error"
	case 62:
		name = "internal micro-controller halt"
	case 63:
		name = "ECC page retirement or row remapping recorded"
	case 64:
		name = "ECC page retirement or row remapping failed"
	case 74:
		name = "NVLink error"
	case 79:
		name = "GPU has fallen off the bus"
	case 92:
		name = "high single-bit ECC error rate"
	case 94:
		name = "contained ECC error"
	case 95:
		name = "uncontained ECC error"
	case 119:
		name = "GSP RPC timeout"
	case 120:
		name = "GSP error"
	}
	if name == "" {
		return fmt.Sprintf("XID %d", xid)
	}
	return fmt.Sprintf("XID %d (%s)", xid, name)
}

// ParseXIDs parses a comma-separated list of XIDs ("" is none).
func ParseXIDs(s string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		x, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("XID %q: want a number: %w", f, err)
		}
		out = append(out, x)
	}
	return out, nil
}
