package group

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
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

// readBounded reads at most MaxFileSize bytes of path; a larger file is an
// error wrapping ErrTooLarge (nothing more of it is read).
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
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
