package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// ErrNoContainer wraps a container whose cgroup or processes are not found
// (not started yet, or gone).
var ErrNoContainer = errors.New("container not found")

// podDirGlobs are where the kubelet puts a pod's cgroup, with cgroupfs and
// systemd drivers, every QoS class (relative to a hierarchy's mount).
func podDirGlobs(uid types.UID) []string {
	u := string(uid)
	us := strings.ReplaceAll(u, "-", "_")
	return []string{
		"kubepods/pod" + u, "kubepods/*/pod" + u,
		"kubepods.slice/kubepods-pod" + us + ".slice", "kubepods.slice/*/kubepods-*-pod" + us + ".slice",
	}
}

// ContainerCgroup finds a container's cgroup directory under a hierarchy
// mounted at root (plus the kubelet's --cgroup-root), from its pod UID and
// runtime container ID.
func ContainerCgroup(root string, uid types.UID, containerID string) (string, error) {
	if containerID == "" || strings.ContainsAny(containerID, "/*?[") || strings.ContainsAny(string(uid), "/*?[") {
		return "", fmt.Errorf("%w: bad id %q/%q", ErrNoContainer, uid, containerID)
	}
	for _, g := range podDirGlobs(uid) {
		pods, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			return "", fmt.Errorf("cgroup glob: %w", err)
		}
		for _, pod := range pods {
			for _, name := range []string{containerID, "cri-containerd-" + containerID + ".scope", "docker-" + containerID + ".scope", "crio-" + containerID + ".scope"} {
				dir := filepath.Join(pod, name)
				if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
					return dir, nil
				}
			}
		}
	}
	return "", fmt.Errorf("%w: no cgroup for pod %s container %s under %s", ErrNoContainer, uid, containerID, root)
}

// FirstPID returns a process of a cgroup directory.
func FirstPID(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoContainer, err)
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("%w: no process in %s", ErrNoContainer, dir)
}

// runtimeID strips the runtime prefix of a container status ID
// ("containerd://abc" -> "abc").
func runtimeID(s string) string {
	if _, id, ok := strings.Cut(s, "://"); ok {
		return id
	}
	return s
}
