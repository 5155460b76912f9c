package group

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Watch calls changed(name) whenever a group appears or disappears, or one of
// its setting files (or cgroup binding) is written and closed or renamed into
// place, until ctx ends. It calls changed for every existing group once at the
// start. Only completed writes count (inotify IN_CLOSE_WRITE / IN_MOVED_TO), so
// `echo 20ms > slice` is seen once, with its final content; and a directory
// made in a group directory (IN_CREATE), which no write follows, where a
// setting file belongs.
func (t Tree) Watch(ctx context.Context, changed func(name string)) error {
	return t.WatchRemoved(ctx, changed, nil)
}

// WatchRemoved is Watch, and calls removed(name) (unless nil) when a group's
// directory is removed by Remove (its owner: renamed aside first), after the
// changed call for its going: a group whose directory just went otherwise (rm
// -r of the run directory) is lost, not removed.
func (t Tree) WatchRemoved(ctx context.Context, changed, removed func(name string)) error {
	if err := os.MkdirAll(t.Dir, 0o755); err != nil {
		return fmt.Errorf("create group tree: %w", err)
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("watch group tree: %w", err)
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: Close interrupts Read
	w := &watcher{t: t, f: f, fd: fd, wds: map[int32]string{}, removed: removed}
	stop := context.AfterFunc(ctx, func() {
		if err := f.Close(); err != nil {
			klog.FromContext(ctx).Error(err, "close group watcher")
		}
	})
	defer stop()
	if err := w.add(t.Dir, "", unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_TO|unix.IN_MOVED_FROM|unix.IN_ONLYDIR); err != nil {
		return err
	}
	names, err := t.List()
	if err != nil {
		return err
	}
	for _, n := range names {
		w.addGroup(ctx, n)
		changed(n)
	}
	return w.loop(ctx, changed)
}

type watcher struct {
	t   Tree
	f   *os.File
	fd  int
	wds map[int32]string // watch descriptor -> group ("" for the tree)
	// removed is told of a group its owner removed (nil: not told).
	removed func(name string)
}

// groupEvents: completed writes and renames into place, and (IN_CREATE) a
// directory made where a setting file belongs, which no write follows.
const groupEvents = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_CREATE | unix.IN_ONLYDIR

func (w *watcher) add(path, name string, mask uint32) error {
	wd, err := unix.InotifyAddWatch(w.fd, path, mask)
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	w.wds[int32(wd)] = name
	return nil
}

func (w *watcher) addGroup(ctx context.Context, name string) {
	if err := w.add(w.t.Path(name), name, groupEvents); err != nil {
		klog.FromContext(ctx).V(2).Info("cannot watch group", "group", name, "err", err)
	}
}

func (w *watcher) loop(ctx context.Context, changed func(name string)) error {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("read group watcher: %w", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			start := off + unix.SizeofInotifyEvent
			if start+nameLen > n {
				break
			}
			file := string(bytes.TrimRight(buf[start:start+nameLen], "\x00"))
			off = start + nameLen
			w.event(ctx, wd, mask, file, changed)
		}
	}
}

func (w *watcher) event(ctx context.Context, wd int32, mask uint32, file string, changed func(string)) {
	grp, ok := w.wds[wd]
	switch {
	case !ok || mask&unix.IN_IGNORED != 0:
		delete(w.wds, wd)
	case grp == "": // the tree: a group directory came or went
		if mask&unix.IN_ISDIR == 0 {
			return
		}
		if strings.HasPrefix(file, ".") {
			if name, ok := removedName(file); ok && w.removed != nil && mask&unix.IN_MOVED_TO != 0 {
				w.removed(name)
			}
			return
		}
		if mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			w.addGroup(ctx, file)
		}
		changed(file)
	case mask&unix.IN_CREATE != 0 && mask&unix.IN_ISDIR == 0:
		// A file being made: seen when its write completes (IN_CLOSE_WRITE).
	case slices.Contains(SettingFiles(), file) || file == FileCgroup || file == FileGeneration:
		changed(grp)
	}
}
