//go:build !gpuslice_faultinject

package dra

import "testing"

// TestReleaseBuildIgnoresCrashEnv: without the gpuslice_faultinject tag the
// agent's Fault is nil whatever its environment says.
func TestReleaseBuildIgnoresCrashEnv(t *testing.T) {
	t.Setenv(CrashAtEnv, string(StepPrepareStarted))
	if f := InjectedFault(); f != nil {
		t.Fatal("the release build injects faults")
	}
}
