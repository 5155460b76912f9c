package group

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"unicode/utf8"
)

// MaxFileSize bounds what is read of any file in a group directory (settings,
// cgroup binding): anyone who can write a group's files could otherwise make
// every reader hold, parse and log a file of any size.
const MaxFileSize = 4096

// MaxValueLen bounds a setting's value (after trimming): the longest valid
// value is far shorter ("1099511627776", "default", a cgroup path is read with
// MaxFileSize).
const MaxValueLen = 64

// quotePrefix is how much of a bad value an error message quotes.
const quotePrefix = 32

// ErrTooLarge is wrapped when a file in the tree is larger than MaxFileSize.
var ErrTooLarge = errors.New("file too large")

// ErrNotRegular is wrapped when a file in the tree is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// OpenFile opens a file in a group directory as os.OpenFile does, but never
// through a symbolic link (its last component), never blocking (a FIFO), and
// only a regular file. A group directory may be written by its owner or by the
// container it is mounted into, and the daemon and the node agent, root, read
// and write its files: a link to /etc/shadow or a FIFO there must not make
// them read, create or change another file, or wait forever.
func OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%w: %s is a symbolic link", ErrNotRegular, path)
	}
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%w: %s (%v)", ErrNotRegular, path, st.Mode().Type())
	}
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return f, nil
}

// readBounded reads at most MaxFileSize bytes of path (a regular file, not
// through a link: OpenFile); a larger file is an error wrapping ErrTooLarge
// (nothing more of it is read).
func readBounded(path string) ([]byte, error) {
	f, err := OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	b, rerr := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err := errors.Join(rerr, f.Close()); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, path, MaxFileSize)
	}
	return b, nil
}

// Quote returns v quoted for a message or log line, cut to a short prefix
// (with its length) when long: a bad value is never echoed whole.
func Quote(v string) string {
	if len(v) <= quotePrefix {
		return fmt.Sprintf("%q", v)
	}
	p := v[:quotePrefix]
	for len(p) > 0 && !utf8.ValidString(p) {
		p = p[:len(p)-1]
	}
	return fmt.Sprintf("%q... (%d bytes)", p, len(v))
}

// checkLen refuses a value longer than MaxValueLen before any parser sees it.
func checkLen(file, v string) error {
	if len(v) > MaxValueLen {
		return fmt.Errorf("%w: %s: value %s is longer than %d bytes", ErrInvalid, file, Quote(v), MaxValueLen)
	}
	if strings.ContainsRune(v, '\n') {
		return fmt.Errorf("%w: %s: value %s has more than one line", ErrInvalid, file, Quote(v))
	}
	return nil
}
