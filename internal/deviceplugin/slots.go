// Package deviceplugin is gpuslice's kubelet device plugin (API v1beta1):
// it advertises GPU slots as the extended resource gpuslice.io/gpu, and on
// Allocate gives a container exactly the GPUs the scheduler assigned it plus
// what the interception library needs. It never guesses which pod an
// Allocate call is for: the kubelet admits pods one at a time and records
// every allocation, so the container it is allocating for is the only one
// it knows that requests the resource and holds no devices yet (see
// Candidates); GetPreferredAllocation picks slots on that container's
// assigned GPUs and Allocate checks that the device IDs name exactly them.
package deviceplugin

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalidSlot wraps a device ID that is not one of ours.
var ErrInvalidSlot = errors.New("invalid gpuslice device ID")

// slotSep separates the GPU UUID from the slot number in a device ID.
const slotSep = "::"

// MaxSlotsPerGPU bounds how many containers may share one GPU.
const MaxSlotsPerGPU = 1024

// SlotID names slot k of a GPU: "<uuid>::<k>". The kubelet hands out slots;
// a container holding a slot of a GPU may use that GPU.
func SlotID(uuid string, k int) string { return uuid + slotSep + strconv.Itoa(k) }

// ParseSlotID splits a device ID into the GPU UUID and slot number.
func ParseSlotID(id string) (uuid string, k int, err error) {
	i := strings.LastIndex(id, slotSep)
	if i <= 0 {
		return "", 0, fmt.Errorf("%w: %q", ErrInvalidSlot, id)
	}
	k, err = strconv.Atoi(id[i+len(slotSep):])
	if err != nil || k < 0 || k >= MaxSlotsPerGPU || strconv.Itoa(k) != id[i+len(slotSep):] {
		return "", 0, fmt.Errorf("%w: %q: bad slot number", ErrInvalidSlot, id)
	}
	return id[:i], k, nil
}
