//go:build gpuslice_faultinject

package dra

import (
	"os"
	"syscall"
)

// InjectedFault is Config.Fault of a test build: the process dies at the
// step CrashAtEnv names (none: nil).
func InjectedFault() func(Step) error {
	at := Step(os.Getenv(CrashAtEnv))
	if at == "" {
		return nil
	}
	return func(s Step) error {
		if s == at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return nil
	}
}
