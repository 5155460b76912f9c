package group

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// fileGenerationFloor, in the tree's directory, holds the highest settings
// generation Bump has numbered (or Restore written) in the tree: a new group
// directory's first number is above it, so a group removed and made again
// under the same name numbers above every generation its earlier directory
// had, whatever the wall clock did in between. The name starts with a dot: no
// group's, and the watcher ignores it.
const fileGenerationFloor = ".settings.generation.floor"

// maxGeneration bounds the number taken from a group's file as the stored
// generation: a larger one (its directory's owner can write it) is replaced
// like a bad number, so the tree's floor, raised by every number Bump makes,
// stays far below overflow (2^62 ns is year 2116 as a clock).
const maxGeneration = 1 << 62

// Bump numbers the settings written so far: under an exclusive lock on the
// group's directory it writes the stored generation plus one (a new
// directory's first: firstGeneration) into FileGeneration and returns it.
// Numbers only grow, and each is written after the settings of its writer,
// so a reader who reads the generation first and the settings after sees at
// least those settings.
func (t Tree) Bump(name string) (uint64, error) { return t.bumpAt(name, time.Now) }

// bumpAt is Bump with the clock now.
func (t Tree) bumpAt(name string, now func() time.Time) (uint64, error) {
	d, err := os.Open(t.Path(name))
	if err != nil {
		return 0, fmt.Errorf("group %s: %w", name, err)
	}
	defer func() { _ = d.Close() }() // read-only; closing drops the lock
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return 0, fmt.Errorf("group %s: lock: %w", name, err)
	}
	var next uint64
	err = t.raiseFloor(func(floor uint64) uint64 {
		cur, err := t.Generation(name)
		if err != nil || cur >= maxGeneration {
			cur = 0 // missing, or a bad number: replaced
		}
		next = cur + 1
		if cur == 0 {
			next = firstGeneration(now(), floor)
		}
		return next
	})
	if err != nil {
		return 0, fmt.Errorf("group %s: %w", name, err)
	}
	if err := t.WriteFile(name, FileGeneration, strconv.FormatUint(next, 10)+"\n"); err != nil {
		return 0, err
	}
	return next, nil
}

// firstGeneration numbers a group directory's first settings: above the
// tree's floor (every number made in the tree so far) and at least the time
// in nanoseconds (a tree made before the floor, or whose floor was lost with
// its run directory, numbered by the clock), never 0. A group removed and made
// again under the same name so gets a larger number than any its earlier
// directory had, and an acknowledgement of the removed group's settings that
// the time-slice daemon was still writing (it lands in the new directory)
// never reads as the new settings applied: their writer waits for its own
// number. The floor, not the clock, carries this when the clock is stepped
// back between the removal and the remake.
func firstGeneration(now time.Time, floor uint64) uint64 {
	return max(uint64(max(now.UnixNano(), 0)), floor+1, 1)
}

// raiseFloor makes the tree's generation floor at least the number next
// returns from the floor it read, under an exclusive lock on the tree's
// directory (Bumps of different groups raise it in turn).
func (t Tree) raiseFloor(next func(floor uint64) uint64) error {
	d, err := os.Open(t.Dir)
	if err != nil {
		return fmt.Errorf("generation floor: %w", err)
	}
	defer func() { _ = d.Close() }() // read-only; closing drops the lock
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("generation floor: lock: %w", err)
	}
	floor := t.floor()
	n := next(floor)
	if n <= floor {
		return nil
	}
	return t.writeFloor(n)
}

// floor reads the tree's generation floor (0: none, or not a number).
func (t Tree) floor() uint64 {
	b, err := readBounded(filepath.Join(t.Dir, fileGenerationFloor))
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// writeFloor replaces the floor file atomically (write, then rename).
func (t Tree) writeFloor(n uint64) error {
	tmp, err := os.CreateTemp(t.Dir, fileGenerationFloor+".tmp-*")
	if err != nil {
		return fmt.Errorf("generation floor: %w", err)
	}
	_, werr := tmp.WriteString(strconv.FormatUint(n, 10) + "\n")
	if err := errors.Join(werr, tmp.Chmod(0o644), tmp.Close()); err != nil {
		return errors.Join(fmt.Errorf("generation floor: %w", err), os.Remove(tmp.Name()))
	}
	if err := os.Rename(tmp.Name(), filepath.Join(t.Dir, fileGenerationFloor)); err != nil {
		return errors.Join(fmt.Errorf("generation floor: %w", err), os.Remove(tmp.Name()))
	}
	return nil
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

// raiseFloorTo raises the tree's generation floor to a restored group's
// generation (its file's content; none or a bad number: nothing).
func (t Tree) raiseFloorTo(gen string) error {
	n, err := strconv.ParseUint(strings.TrimSpace(gen), 10, 64)
	if err != nil || n >= maxGeneration {
		return nil
	}
	return t.raiseFloor(func(floor uint64) uint64 { return max(floor, n) })
}
