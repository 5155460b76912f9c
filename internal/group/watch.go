package group

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// Watch calls changed(name) whenever a group appears, disappears, or one of its
// setting files (or cgroup binding) is written, until ctx ends. It calls
// changed for every existing group once at the start.
func (t Tree) Watch(ctx context.Context, changed func(name string)) error {
	if err := os.MkdirAll(t.Dir, 0o755); err != nil {
		return fmt.Errorf("create group tree: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch group tree: %w", err)
	}
	defer func() {
		if err := w.Close(); err != nil {
			klog.FromContext(ctx).Error(err, "close group watcher")
		}
	}()
	if err := w.Add(t.Dir); err != nil {
		return fmt.Errorf("watch %s: %w", t.Dir, err)
	}
	names, err := t.List()
	if err != nil {
		return err
	}
	for _, n := range names {
		t.watchGroup(ctx, w, n)
		changed(n)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.Errors:
			klog.FromContext(ctx).Error(err, "group watcher")
		case ev := <-w.Events:
			if name, ok := t.relevant(ev); ok {
				if ev.Has(fsnotify.Create) && filepath.Dir(ev.Name) == t.Dir {
					t.watchGroup(ctx, w, name)
				}
				changed(name)
			}
		}
	}
}

func (t Tree) watchGroup(ctx context.Context, w *fsnotify.Watcher, name string) {
	if err := w.Add(t.Path(name)); err != nil {
		klog.FromContext(ctx).V(2).Info("cannot watch group", "group", name, "err", err)
	}
}

// relevant maps an event to the group it concerns; read-back files and
// temporary files are ignored.
func (t Tree) relevant(ev fsnotify.Event) (string, bool) {
	rel, err := filepath.Rel(t.Dir, ev.Name)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", false
	}
	parts := strings.Split(rel, string(filepath.Separator))
	switch len(parts) {
	case 1:
		return parts[0], !strings.HasPrefix(parts[0], ".")
	case 2:
		return parts[0], slices.Contains(SettingFiles(), parts[1]) || parts[1] == FileCgroup
	}
	return "", false
}
