package api

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// SharingMode is how the pods on one GPU share it.
type SharingMode string

// Sharing modes.
const (
	// SharingTimeslice: gpuslice's time slices (the time-slice daemon grants GPU
	// time; strong isolation, priorities). The mode of a GPU whose table
	// entry names none.
	SharingTimeslice SharingMode = "timeslice"
	// SharingMPS: each container is a client of the GPU's MPS server,
	// limited to its active thread percentage; kernels of different pods run
	// at the same time (low latency for small kernels, no context switches).
	SharingMPS SharingMode = "mps"
)

// AnnotationSharing on a pod names the sharing mode its GPUs must have
// (absent: either).
const AnnotationSharing = Group + "/sharing"

// MPS logical units: a GPU in mps mode holds UnitsPerClient x ClientLimit x
// Servers units (M x N x K).
const (
	// MPSClientLimit is the MPS server's client limit on Volta and later GPUs (N).
	MPSClientLimit = 48
	// DefaultMPSUnitsPerClient is M by default.
	DefaultMPSUnitsPerClient = 2
	// DefaultMPSServers is K by default.
	DefaultMPSServers = 1
)

// MPSUnits is the unit capacity of a GPU in mps mode: m x n x k.
func MPSUnits(unitsPerClient, clientLimit, servers int) int64 {
	return int64(unitsPerClient) * int64(clientLimit) * int64(servers)
}

// SharingModes lists the valid modes.
func SharingModes() []SharingMode { return []SharingMode{SharingTimeslice, SharingMPS} }

// Valid reports whether m names a known mode.
func (m SharingMode) Valid() bool { return m == SharingTimeslice || m == SharingMPS }

// ParseSharingMode reads a mode name.
func ParseSharingMode(s string) (SharingMode, error) {
	if m := SharingMode(s); m.Valid() {
		return m, nil
	}
	return "", fmt.Errorf("sharing mode %q: want one of %v", s, SharingModes())
}

// Accepts reports whether a GPU in mode m may take a pod that asks for want
// ("" = either).
func (m SharingMode) Accepts(want SharingMode) bool {
	if m == "" {
		m = SharingTimeslice
	}
	return want == "" || want == m
}

// ParseSharing reads the pod's sharing annotation ("" when absent).
func ParseSharing(pod *corev1.Pod) (SharingMode, error) {
	v, ok := pod.Annotations[AnnotationSharing]
	if !ok {
		return "", nil
	}
	m, err := ParseSharingMode(v)
	if err != nil {
		return "", fmt.Errorf("annotation %s: %w", AnnotationSharing, err)
	}
	return m, nil
}
