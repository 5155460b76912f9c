// Package deviceplugin is gpuslice's kubelet device plugin (API v1beta1):
// it advertises GPU slots as the extended resource gpuslice.io/gpu, and on
// Allocate gives a container exactly the GPUs the scheduler assigned it plus
// what the interception library needs. GetPreferredAllocation picks slots
// on that container's assigned GPUs and Allocate checks that the device IDs
// name exactly them.
//
// It never guesses which pod an Allocate call is for (the API names none).
// What the kubelet (v1.37) guarantees: HandlePodAdditions sorts a batch by
// creation time and, on its one sync-loop goroutine, adds each pod to its
// pod manager and then admits it (device allocation is part of admission)
// before it looks at the next one; the pod-resources List lists the pod
// manager's active pods (KubeletPodResourcesListUseActivePods, on since
// 1.34) with the devices each container holds. So a pod bound at the same
// instant as the one being admitted is not listed yet, and the pods admitted
// before it hold their devices: "two pods arriving at once" never makes two
// candidates. What it does not guarantee: the kubelet drops the devices of
// every pod that is inactive at the moment it runs UpdateAllocatedDevices
// (each List and each allocation does), and a pod whose containers have all
// exited is inactive for a moment (SyncPod sets its terminal phase before
// the pod worker marks it terminating) and then active again while it
// terminates: listed, holding nothing, until its sandbox is stopped. That is
// the second "waiting" container the CI rehearsal saw (team-b/burst-23 had
// run for 6 s when team-a/burst-34 was refused). So a container counts as
// allocated (Records, Candidates) when the kubelet lists devices of the
// resource for it, or when it holds nothing but its group exists (Allocate
// made it; the agent removes it only after the pod left the node), or when
// its pod has a status.startTime (the kubelet sets it only once it has
// admitted the pod). Rejected designs: the oldest
// candidate would have been burst-23 (another pod's group and limits);
// slot IDs named by the assignment need GetPreferredAllocation to know the
// pod first, the same question; one answer for interchangeable candidates
// bound later by cgroup would move the limit out of the Allocate answer for
// a race the records above already settle. Should two containers ever be
// left (records lost), Allocate still refuses (ErrAmbiguous).
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
