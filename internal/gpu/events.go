package gpu

import (
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrTimeout: no event before the wait's timeout.
var ErrTimeout = fmt.Errorf("%w: no event before the timeout", ErrNVML)

// ErrNoEvents: the GPU does not report XID events (it is watched through
// queries only).
var ErrNoEvents = fmt.Errorf("%w: XID events not supported", ErrNVML)

// XIDEvent is an XID critical error NVML reported on a GPU. UUID is empty
// when NVML could not name the device (UUIDErr says why).
type XIDEvent struct {
	UUID    string
	XID     uint64
	UUIDErr error
}

// EventSet is an NVML event set watching XID critical errors.
type EventSet interface {
	// Wait blocks up to timeout for the next event; ErrTimeout when none came.
	Wait(timeout time.Duration) (XIDEvent, error)
	Close() error
}

// XIDWatcher registers GPUs for XID critical error events.
type XIDWatcher interface {
	// WatchXIDs creates an event set for the devices at these indices. A
	// device that could not be registered is in failed (ErrNoEvents if it
	// does not support XID events); err is for the set itself.
	WatchXIDs(indices []int) (set EventSet, failed map[int]error, err error)
}

// WatchXIDs implements XIDWatcher.
func (l *lib) WatchXIDs(indices []int) (EventSet, map[int]error, error) {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	set, ret := l.n.EventSetCreate()
	if err := check("create event set", ret); err != nil {
		return nil, nil, err
	}
	failed := map[int]error{}
	for _, i := range indices {
		if err := l.register(i, set); err != nil {
			failed[i] = err
		}
	}
	return &eventSet{set: set}, failed, nil
}

func (l *lib) register(index int, set nvml.EventSet) error {
	d, err := l.handle(index)
	if err != nil {
		return err
	}
	types, ret := d.GetSupportedEventTypes()
	if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.SUCCESS && types&nvml.EventTypeXidCriticalError == 0 {
		return fmt.Errorf("device %d: %w", index, ErrNoEvents)
	}
	if err := check(fmt.Sprintf("device %d supported events", index), ret); err != nil {
		return err
	}
	ret = d.RegisterEvents(nvml.EventTypeXidCriticalError, set)
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return fmt.Errorf("device %d: %w", index, ErrNoEvents)
	}
	return check(fmt.Sprintf("device %d register events", index), ret)
}

type eventSet struct{ set nvml.EventSet }

// Wait holds go-nvml's state shared (nvmlState) while it blocks: an Init or
// Shutdown elsewhere in the process waits up to timeout.
func (s *eventSet) Wait(timeout time.Duration) (XIDEvent, error) {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	ms := uint32(min(max(timeout.Milliseconds(), 0), 1<<31))
	for {
		e, ret := s.set.Wait(ms)
		if ret == nvml.ERROR_TIMEOUT {
			return XIDEvent{}, ErrTimeout
		}
		if err := check("wait for events", ret); err != nil {
			return XIDEvent{}, err
		}
		if e.EventType != nvml.EventTypeXidCriticalError {
			continue // only XIDs were registered
		}
		ev := XIDEvent{XID: e.EventData}
		if e.Device == nil {
			ev.UUIDErr = errors.New("event without a device")
			return ev, nil
		}
		uuid, ret := e.Device.GetUUID()
		if ret != nvml.SUCCESS {
			ev.UUIDErr = check("event device uuid", ret)
			return ev, nil
		}
		ev.UUID = uuid
		return ev, nil
	}
}

func (s *eventSet) Close() error {
	nvmlState.RLock()
	defer nvmlState.RUnlock()
	return check("free event set", s.set.Free())
}
