package mps

import (
	"fmt"
	"strconv"
)

// ThreadPercentage is CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for a client holding
// units of a server whose clients share serverUnits: rounded up, 1..100.
func ThreadPercentage(units, serverUnits int64) (int, error) {
	if units <= 0 || serverUnits <= 0 {
		return 0, fmt.Errorf("thread percentage of %d units out of %d: both must be positive", units, serverUnits)
	}
	if units >= serverUnits {
		return 100, nil
	}
	return int((units*100 + serverUnits - 1) / serverUnits), nil
}

// PinnedMemLimit is CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for a client with a
// per-GPU memory limit on its devices 0..gpus-1: "0=<MiB>M,1=<MiB>M,..."
// (whole MiB, rounded down, at least 1). "" when memBytes is 0 (no limit).
func PinnedMemLimit(memBytes int64, gpus int) string {
	if memBytes <= 0 || gpus <= 0 {
		return ""
	}
	mib := max(memBytes>>20, 1)
	out := ""
	for i := range gpus {
		if i > 0 {
			out += ","
		}
		out += strconv.Itoa(i) + "=" + strconv.FormatInt(mib, 10) + "M"
	}
	return out
}

// FreeUnits is what a GPU in mps mode can still give: the units not booked,
// bounded by the client slots left (each client slot is worth unitsPerClient).
func FreeUnits(unbooked int64, liveClients, clientSlots, unitsPerClient int) int64 {
	slots := int64(max(clientSlots-liveClients, 0)) * int64(unitsPerClient)
	return max(min(unbooked, slots), 0)
}
