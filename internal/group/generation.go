package group

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Bump numbers the settings written so far: under an exclusive lock on the
// group's directory it writes the stored generation plus one (a new
// directory's first: firstGeneration) into FileGeneration and returns it. Numbers only grow, and each is written
// after the settings of its writer, so a reader who reads the generation
// first and the settings after sees at least those settings.
func (t Tree) Bump(name string) (uint64, error) {
	d, err := os.Open(t.Path(name))
	if err != nil {
		return 0, fmt.Errorf("group %s: %w", name, err)
	}
	defer func() { _ = d.Close() }() // read-only; closing drops the lock
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return 0, fmt.Errorf("group %s: lock: %w", name, err)
	}
	cur, err := t.Generation(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		cur = 0 // a bad number is replaced
	}
	next := cur + 1
	if cur == 0 {
		next = firstGeneration(time.Now())
	}
	if err := t.WriteFile(name, FileGeneration, strconv.FormatUint(next, 10)+"\n"); err != nil {
		return 0, err
	}
	return next, nil
}

// firstGeneration numbers a group directory's first settings: the time in
// nanoseconds (at least 1), not 1. A group removed and made again under the
// same name gets a larger number than any its earlier directory had, so an
// acknowledgement of the removed group's settings that the time-slice daemon
// was still writing (it lands in the new directory) never reads as the new
// settings applied: their writer waits for its own number.
func firstGeneration(now time.Time) uint64 {
	return max(uint64(max(now.UnixNano(), 0)), 1)
}

// Generation reads the group's settings generation (FileGeneration).
func (t Tree) Generation(name string) (uint64, error) { return t.readCounter(name, FileGeneration) }

// Applied reads the generation the time-slice daemon has applied (FileApplied).
func (t Tree) Applied(name string) (uint64, error) { return t.readCounter(name, FileApplied) }

func (t Tree) readCounter(name, file string) (uint64, error) {
	v, err := t.ReadFile(name, file)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("group %s: %s: %w", name, file, err)
	}
	return n, nil
}
