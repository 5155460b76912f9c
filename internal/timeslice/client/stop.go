package client

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// StopPID sends sig to pid (a daemon, through a pidfd: never a process that
// reused the number) and waits up to wait until it has exited. A process
// already gone is no error.
func StopPID(pid int, sig unix.Signal, wait time.Duration) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop %d: %w", pid, err)
	}
	defer unix.Close(fd) //nolint:errcheck // a pidfd: nothing to flush
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("stop %d: %w", pid, err)
	}
	for deadline := time.Now().Add(wait); ; {
		left := max(time.Until(deadline), 0)
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds()))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("wait for %d: %w", pid, err)
		case n == 0:
			return fmt.Errorf("process %d still running %v after %v", pid, wait, sig)
		}
		return nil
	}
}
