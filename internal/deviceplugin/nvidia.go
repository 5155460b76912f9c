package deviceplugin

import (
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The NVIDIA container contract: what the NVIDIA container toolkit reads to
// inject the driver libraries and device nodes of the GPUs a container may
// use.
const (
	// EnvVisibleDevices lists the container's GPUs by UUID (legacy and
	// "envvar" device list strategy).
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// VolumeDevicesDir: the "volume-mounts" strategy, which the toolkit
	// trusts for unprivileged containers when configured with
	// accept-nvidia-visible-devices-as-volume-mounts: one mount of
	// /dev/null per GPU at <dir>/<UUID>.
	VolumeDevicesDir = "/var/run/nvidia-container-devices"
)

// nvidiaContract adds the container's GPUs (UUIDs, sorted) to r as the
// toolkit expects them: NVIDIA_VISIBLE_DEVICES (the container's runtime
// environment: it overrides an image's own, so an image saying "all" sees
// only these) and the volume-mount list. (The device plugin's answer adds
// the GPUs' CDI device names, Response.)
func nvidiaContract(r *edits, uuids []string) {
	if len(uuids) == 0 {
		r.env[EnvVisibleDevices] = "void" // the toolkit's "no GPU"
		return
	}
	r.env[EnvVisibleDevices] = strings.Join(uuids, ",")
	for _, u := range uuids {
		r.mount("/dev/null", path.Join(VolumeDevicesDir, u), true)
	}
}

// contractEnv are the variables by which a container could ask the NVIDIA
// toolkit for GPUs (or driver capabilities) other than its own.
var contractEnv = []string{EnvVisibleDevices, "NVIDIA_VISIBLE_DEVICES_OVERRIDE", "CUDA_VISIBLE_DEVICES_OVERRIDE"}

// CheckContainerEnv refuses a container whose pod spec sets
// NVIDIA_VISIBLE_DEVICES itself: the kubelet would put the pod's value after
// ours, and a toolkit that reads the variable would give the container the
// GPUs it names. (A value from envFrom is not visible here: toolkits set to
// the volume-mount or CDI strategy ignore the variable, and the hot-plug
// reconciler takes back any GPU node the container was not assigned.)
func CheckContainerEnv(pod *corev1.Pod, container string) error {
	if pod == nil {
		return nil
	}
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		if c.Name != container {
			continue
		}
		for _, e := range c.Env {
			if slices.Contains(contractEnv, e.Name) {
				return fmt.Errorf("container %s sets %s itself: the GPUs a container sees are its assignment only (remove it from the pod spec)", container, e.Name)
			}
		}
	}
	return nil
}
