package group

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/paths"
)

// FileCgroup optionally binds a group to a cgroup: processes whose cgroup path
// (from /proc/<pid>/cgroup) starts with its content belong to the group. The
// node agent writes it for containers.
const FileCgroup = "cgroup"

// Tree is the group directory tree rooted at Dir (<run dir>/groups).
type Tree struct {
	Dir string
}

// NewTree returns the tree of a run directory.
func NewTree(runDir string) Tree { return Tree{Dir: filepath.Join(runDir, "groups")} }

// Path is the directory of group name.
func (t Tree) Path(name string) string { return filepath.Join(t.Dir, name) }

// Create makes the group's directory (and the tree) if missing.
func (t Tree) Create(name string) error {
	if err := paths.ValidateGroup(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := os.MkdirAll(t.Path(name), 0o755); err != nil {
		return fmt.Errorf("create group %s: %w", name, err)
	}
	return nil
}

// Exists reports whether the group's directory exists.
func (t Tree) Exists(name string) bool {
	st, err := os.Stat(t.Path(name))
	return err == nil && st.IsDir()
}

// List returns the group names, sorted.
func (t Tree) List() ([]string, error) {
	ents, err := os.ReadDir(t.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && paths.ValidateGroup(e.Name()) == nil {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// Read returns a group's settings; missing files mean defaults.
func (t Tree) Read(name string) (Settings, error) {
	var s Settings
	if err := paths.ValidateGroup(name); err != nil {
		return s, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if !t.Exists(name) {
		return s, fmt.Errorf("group %s does not exist (no %s)", name, t.Path(name))
	}
	for _, f := range SettingFiles() {
		b, err := readBounded(filepath.Join(t.Path(name), f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return Settings{}, fmt.Errorf("group %s: %w", name, err)
		}
		if err := s.Apply(f, string(b)); err != nil {
			return Settings{}, fmt.Errorf("group %s: %w", name, err)
		}
	}
	return s, nil
}

// ReadValid returns a group's settings from its valid setting files, with
// the default for each file that is missing, unreadable or invalid: what to
// write back when no earlier valid settings are known.
func (t Tree) ReadValid(name string) Settings {
	var s Settings
	if paths.ValidateGroup(name) != nil {
		return s
	}
	for _, f := range SettingFiles() {
		b, err := readBounded(filepath.Join(t.Path(name), f))
		if err != nil {
			continue
		}
		if next := s; next.Apply(f, string(b)) == nil {
			s = next
		}
	}
	return s
}

// Change is one setting to write.
type Change struct{ File, Value string }

// ParseChange parses "file=value" (e.g. "slice=20ms").
func ParseChange(s string) (Change, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return Change{}, fmt.Errorf("%w: %q: want setting=value, e.g. slice=20ms", ErrInvalid, s)
	}
	return Change{File: k, Value: v}, nil
}

// Set applies changes to a group, creating it if needed. Every change is
// validated first: on any error nothing is written.
func (t Tree) Set(name string, changes []Change) (Settings, error) {
	if err := paths.ValidateGroup(name); err != nil {
		return Settings{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var s Settings
	exists := t.Exists(name)
	if exists {
		var err error
		if s, err = t.Read(name); err != nil {
			return Settings{}, err
		}
	}
	n := s
	for _, c := range changes {
		if err := n.Apply(c.File, c.Value); err != nil {
			return s, err
		}
	}
	if err := t.put(name, n, exists); err != nil {
		return s, err
	}
	return n, nil
}

// Put makes a group's settings s, creating the group with all of them at once
// if it is missing. s is validated first: on error nothing is written.
func (t Tree) Put(name string, s Settings) error {
	if err := paths.ValidateGroup(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := s.Validate(); err != nil {
		return err
	}
	return t.put(name, s, t.Exists(name))
}

// put writes n, in a new directory that appears at once unless exists.
func (t Tree) put(name string, n Settings, exists bool) error {
	if !exists {
		switch err := t.createWith(name, n, nil, -1, -1); {
		case err == nil:
			return nil
		case !errors.Is(err, fs.ErrExist):
			return err
		} // made meanwhile by another writer: set its files one by one
	}
	if err := t.Create(name); err != nil {
		return err
	}
	return t.Write(name, n)
}

// Restore makes a lost group again (its run directory was removed under the
// time-slice daemon), appearing at once with its settings s and the other
// files given (file name -> content: its cgroup binding, GPUs, gate-off,
// settings generation), its directory owned by uid and gid (-1: as made).
// fs.ErrExist if the group exists (nothing changed then).
func (t Tree) Restore(name string, s Settings, files map[string]string, uid, gid int) error {
	if err := paths.ValidateGroup(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := s.Validate(); err != nil {
		return err
	}
	for f := range files {
		if f == "" || strings.ContainsRune(f, '/') || strings.HasPrefix(f, ".") || slices.Contains(SettingFiles(), f) {
			return fmt.Errorf("%w: group %s: file %q cannot be restored", ErrInvalid, name, f)
		}
	}
	return t.createWith(name, s, files, uid, gid)
}

// createWith makes a new group directory that appears with every setting of s
// (and the other files given) at once: the files are written into a staging
// directory beside it (the watcher ignores names starting with a dot), which
// is then renamed into place. One rename instead of one per file. The
// directory is owned by uid/gid unless -1. fs.ErrExist if the group came to
// exist meanwhile (nothing changed then).
func (t Tree) createWith(name string, s Settings, files map[string]string, uid, gid int) (err error) {
	if err := os.MkdirAll(t.Dir, 0o755); err != nil {
		return fmt.Errorf("create group %s: %w", name, err)
	}
	stage := filepath.Join(t.Dir, fmt.Sprintf(".%s.new-%d-%d", name, os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(stage, 0o755); err != nil {
		return fmt.Errorf("create group %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, os.RemoveAll(stage))
		}
	}()
	for _, f := range SettingFiles() {
		v, err := s.Format(f)
		if err != nil {
			return err
		}
		if err := writeNew(filepath.Join(stage, f), v+"\n"); err != nil {
			return fmt.Errorf("group %s: %w", name, err)
		}
	}
	for f, v := range files {
		if err := writeNew(filepath.Join(stage, f), v); err != nil {
			return fmt.Errorf("group %s: %w", name, err)
		}
	}
	if uid >= 0 || gid >= 0 {
		if err := os.Lchown(stage, uid, gid); err != nil {
			return fmt.Errorf("group %s: %w", name, err)
		}
	}
	if err := os.Rename(stage, t.Path(name)); err != nil {
		if t.Exists(name) {
			return fmt.Errorf("create group %s: %w", name, fs.ErrExist)
		}
		return fmt.Errorf("create group %s: %w", name, err)
	}
	return nil
}

// writeNew creates a file readable by all (whatever the umask) with content.
func writeNew(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(content)
	return errors.Join(werr, f.Chmod(0o644), f.Close())
}

// Write stores every setting of s in the group's files (each replaced
// atomically). Settings going back to their default are written first, so a
// watcher never sees a slice and a share set at once in between.
func (t Tree) Write(name string, s Settings) error {
	files := SettingFiles()
	vals := map[string]string{}
	for _, f := range files {
		v, err := s.Format(f)
		if err != nil {
			return err
		}
		vals[f] = v
	}
	slices.SortStableFunc(files, func(a, b string) int {
		isDef := func(f string) bool { return vals[f] == "default" }
		switch {
		case isDef(a) && !isDef(b):
			return -1
		case !isDef(a) && isDef(b):
			return 1
		}
		return 0
	})
	for _, f := range files {
		if err := t.WriteFile(name, f, vals[f]+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile replaces one file of a group atomically (write, then rename).
func (t Tree) WriteFile(name, file, content string) error {
	dir := t.Path(name)
	tmp, err := os.CreateTemp(dir, "."+file+".tmp-*")
	if err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	// Its mode through the descriptor, not the name: the directory's owner
	// could put a link to any file at that name meanwhile (the daemon is root).
	_, werr := tmp.WriteString(content)
	if err := errors.Join(werr, tmp.Chmod(0o644), tmp.Close()); err != nil {
		return errors.Join(fmt.Errorf("group %s: write %s: %w", name, file, err), os.Remove(tmp.Name()))
	}
	target := filepath.Join(dir, file)
	err = os.Rename(tmp.Name(), target)
	if err != nil && removeDirAt(target) { // a directory where the file belongs: gone, try again
		err = os.Rename(tmp.Name(), target)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("group %s: %w", name, err), os.Remove(tmp.Name()))
	}
	return nil
}

// OpenDir opens a group's directory (read-only) for WriteFileAt.
func (t Tree) OpenDir(name string) (*os.File, error) {
	d, err := os.OpenFile(t.Path(name), os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("group %s: %w", name, err)
	}
	return d, nil
}

// WriteFileAt replaces one file of a group atomically, as WriteFile, in the
// directory d (OpenDir) and no other: through its descriptor, so once that
// directory is removed the write fails, even with another made under the
// same name meanwhile (on the same inode, perhaps: not while d is open). The
// time-slice daemon acknowledges a group's settings generation so, into the
// directory it opened before reading it.
func (t Tree) WriteFileAt(d *os.File, name, file, content string) error {
	rc, err := d.SyscallConn()
	if err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	var werr error
	if err := rc.Control(func(dfd uintptr) { werr = writeAt(int(dfd), file, content) }); err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	if werr != nil {
		return fmt.Errorf("group %s: write %s: %w", name, file, werr)
	}
	return nil
}

// writeAt writes file in directory dfd: a new file, then renamed into place.
func writeAt(dfd int, file, content string) error {
	tmp := fmt.Sprintf(".%s.tmp-%d-%d", file, os.Getpid(), time.Now().UnixNano())
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, werr := f.WriteString(content)
	if err := errors.Join(werr, f.Chmod(0o644), f.Close()); err != nil {
		return errors.Join(err, unix.Unlinkat(dfd, tmp, 0))
	}
	err = unix.Renameat(dfd, tmp, dfd, file)
	if err != nil && removeDirUnder(dfd, file) { // a directory where the file belongs: gone, try again
		err = unix.Renameat(dfd, tmp, dfd, file)
	}
	if err != nil {
		return errors.Join(err, unix.Unlinkat(dfd, tmp, 0))
	}
	return nil
}

// removeDirUnder is removeDirAt in the directory dfd and no other: a
// directory its owner made at file is renamed aside, then removed with what
// it holds (through the descriptor's own directory, /proc/self/fd: never one
// made again under the group's name). It reports whether file was a
// directory and is gone.
func removeDirUnder(dfd int, file string) bool {
	var st unix.Stat_t
	if unix.Fstatat(dfd, file, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	aside := fmt.Sprintf(".%s.dir-%d-%d", file, os.Getpid(), time.Now().UnixNano())
	if unix.Renameat(dfd, file, dfd, aside) != nil {
		return false
	}
	if unix.Unlinkat(dfd, aside, unix.AT_REMOVEDIR) != nil { // not empty
		_ = os.RemoveAll(fmt.Sprintf("/proc/self/fd/%d/%s", dfd, aside)) //nolint:errcheck // out of the way already, as in removeDirAt
	}
	return true
}

// removeDirAt removes a directory found where a group's file belongs (its
// owner made it): renamed aside first (the watcher ignores names starting
// with a dot), so the file can take its place at once, then removed with
// what it holds (os.RemoveAll never follows a link). It reports whether path
// was a directory and is gone.
func removeDirAt(path string) bool {
	st, err := os.Lstat(path)
	if err != nil || !st.IsDir() {
		return false
	}
	aside := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.dir-%d-%d", filepath.Base(path), os.Getpid(), time.Now().UnixNano()))
	if os.Rename(path, aside) != nil {
		return false
	}
	_ = os.RemoveAll(aside) //nolint:errcheck // out of the way already; a name starting with a dot is nobody's file
	return true
}

// ReadFile returns one file of a group, trimmed.
func (t Tree) ReadFile(name, file string) (string, error) {
	b, err := readBounded(filepath.Join(t.Path(name), file))
	if err != nil {
		return "", fmt.Errorf("group %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Remove deletes a group's directory (none: no error) while the time-slice
// daemon may still be writing its read-back files into it: the directory is
// renamed aside first (the daemon's next write by path then fails instead of
// landing in it; the watcher ignores names starting with a dot), then
// removed, with more passes for a file the daemon was creating at that very moment.
func (t Tree) Remove(name string) error {
	if err := paths.ValidateGroup(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	aside := filepath.Join(t.Dir, fmt.Sprintf("%s%s-%d", removingPrefix, name, os.Getpid()))
	if err := os.Rename(t.Path(name), aside); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove group %s: %w", name, err)
	}
	var err error
	for range 3 {
		if err = os.RemoveAll(aside); err == nil {
			return nil
		}
	}
	return fmt.Errorf("remove group %s: %w", name, err)
}

// removingPrefix starts the name a group's directory is renamed to by Remove
// (".removing-<name>-<pid>"): the watcher tells a group its owner removed
// from one that was lost.
const removingPrefix = ".removing-"

// removedName is the group a directory renamed to file was, if Remove renamed
// it there.
func removedName(file string) (string, bool) {
	rest, ok := strings.CutPrefix(file, removingPrefix)
	i := strings.LastIndexByte(rest, '-')
	if !ok || i <= 0 {
		return "", false
	}
	name, pid := rest[:i], rest[i+1:]
	if pid == "" || strings.Trim(pid, "0123456789") != "" || paths.ValidateGroup(name) != nil {
		return "", false
	}
	return name, true
}

// Cgroup returns the group's cgroup binding ("" if none).
func (t Tree) Cgroup(name string) string {
	b, err := readBounded(filepath.Join(t.Path(name), FileCgroup))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
