// Package cri finds a running container's host process and OCI runtime spec
// through the Container Runtime Interface: ContainerStatus with verbose=true,
// over the runtime's socket (containerd, CRI-O: both put a JSON object with
// "pid" and "runtimeSpec" under the "info" key). ParseStatus is the pure
// reading of that reply (untrusted input: bounded, checked, fuzzed); Client
// is the gRPC client (k8s.io/cri-api).
package cri

import (
	"encoding/json"
	"errors"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ErrNotFound wraps a container the runtime does not know (gone, or not
// created yet).
var ErrNotFound = errors.New("container not found by the runtime")

// ErrNotRunning wraps a container that is not running (created or exited).
var ErrNotRunning = errors.New("container not running")

// ErrBadStatus wraps a status reply that cannot be read.
var ErrBadStatus = errors.New("bad container status")

// InfoKey is the verbose info key containerd and CRI-O put their JSON under.
const InfoKey = "info"

// MaxInfoBytes bounds the verbose info read (an OCI spec is a few KiB).
const MaxInfoBytes = 4 << 20

// maxPID is the kernel's PID_MAX_LIMIT (2^22).
const maxPID = 1 << 22

// Container is what the agent needs of a running container.
type Container struct {
	ID string
	// PID is the container's init process in the runtime's (the host's)
	// PID namespace.
	PID int
	// Spec is the OCI runtime spec the container was created with.
	Spec *specs.Spec
}

// verboseInfo is the part of the runtimes' verbose info read here; the
// rest (sandboxID, snapshotter, config, privileged...) is ignored.
type verboseInfo struct {
	PID         *int64          `json:"pid"`
	RuntimeSpec json.RawMessage `json:"runtimeSpec"`
}

// ParseStatus reads a ContainerStatus(verbose) reply for container id: the
// container must be the one asked for and running, and its verbose info must
// name a PID in the kernel's range and a runtime spec.
func ParseStatus(id string, r *runtimeapi.ContainerStatusResponse) (Container, error) {
	if r == nil || r.Status == nil {
		return Container{}, fmt.Errorf("%w: container %s: no status", ErrBadStatus, id)
	}
	if r.Status.Id != id {
		return Container{}, fmt.Errorf("%w: asked for container %q, got %q", ErrBadStatus, id, r.Status.Id)
	}
	if r.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return Container{}, fmt.Errorf("%w: container %s is %s", ErrNotRunning, id, r.Status.State)
	}
	raw, ok := r.Info[InfoKey]
	if !ok {
		return Container{}, fmt.Errorf("%w: container %s: the runtime gave no verbose %q", ErrBadStatus, id, InfoKey)
	}
	c, err := ParseInfo(raw)
	if err != nil {
		return Container{}, fmt.Errorf("container %s: %w", id, err)
	}
	c.ID = id
	return c, nil
}

// ParseInfo reads the verbose info JSON of a running container.
func ParseInfo(raw string) (Container, error) {
	if len(raw) > MaxInfoBytes {
		return Container{}, fmt.Errorf("%w: verbose info of %d bytes (at most %d)", ErrBadStatus, len(raw), MaxInfoBytes)
	}
	var v verboseInfo
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return Container{}, fmt.Errorf("%w: verbose info: %w", ErrBadStatus, err)
	}
	if v.PID == nil || *v.PID <= 0 || *v.PID > maxPID {
		return Container{}, fmt.Errorf("%w: verbose info: pid %s", ErrBadStatus, pidString(v.PID))
	}
	if len(v.RuntimeSpec) == 0 || string(v.RuntimeSpec) == "null" {
		return Container{}, fmt.Errorf("%w: verbose info: no runtimeSpec", ErrBadStatus)
	}
	var spec specs.Spec
	if err := json.Unmarshal(v.RuntimeSpec, &spec); err != nil {
		return Container{}, fmt.Errorf("%w: verbose info: runtimeSpec: %w", ErrBadStatus, err)
	}
	return Container{PID: int(*v.PID), Spec: &spec}, nil
}

func pidString(p *int64) string {
	if p == nil {
		return "missing"
	}
	return fmt.Sprint(*p)
}
