//go:build !gpuslice_faultinject

package dra

// InjectedFault is Config.Fault of the release build: none. A fault can
// only be injected into a build with the gpuslice_faultinject tag (the node
// end-to-end test's), never through a release agent's input.
func InjectedFault() func(Step) error { return nil }
