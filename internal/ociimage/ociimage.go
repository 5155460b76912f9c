// Package ociimage writes OCI image archives (an OCI image layout in a tar,
// as `ctr images import` and `docker load`/`podman load` read it) from host
// files, without a container engine: one uncompressed, reproducible layer
// (fixed modification times, sorted entries).
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Files maps absolute paths in the image to host files (copied with their
// permission bits).
type Files map[string]string

// AddWithLibs adds a host binary at dst and every shared library ldd names
// for it, at the same paths as on the host (a static binary adds none).
func (f Files) AddWithLibs(dst, src string) error {
	if _, err := os.Stat(src); err != nil {
		return fmt.Errorf("image file: %w", err)
	}
	f[dst] = src
	out, err := exec.Command("ldd", src).Output()
	if err != nil {
		return nil // not a dynamic executable (ldd exits 1)
	}
	for _, line := range strings.Split(string(out), "\n") {
		for _, p := range strings.Fields(line) {
			if strings.HasPrefix(p, "/") {
				f[p] = p
			}
		}
	}
	return nil
}

// Image describes one image.
type Image struct {
	// Name is the reference, e.g. registry/name:tag.
	Name       string
	Files      Files
	Entrypoint []string
	User       string
	Labels     map[string]string
	// Dirs are empty directories made in the image (besides the files' parents).
	Dirs []string
	// Symlinks maps absolute paths in the image to their targets (e.g. busybox applets).
	Symlinks map[string]string
}

// epoch is every entry's modification time (reproducible layers).
var epoch = time.Unix(0, 0)

// Write writes img's archive to path and returns the layer's size in bytes.
func Write(path string, img Image) (int64, error) {
	layer, err := layerTar(img)
	if err != nil {
		return 0, err
	}
	cfg, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux", "created": epoch.UTC().Format(time.RFC3339),
		"config": map[string]any{"Entrypoint": img.Entrypoint, "User": img.User, "Labels": img.Labels,
			"Env": []string{"PATH=/usr/local/bin:/usr/bin:/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(layer)}},
	})
	if err != nil {
		return 0, fmt.Errorf("image config: %w", err)
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config":      desc("application/vnd.oci.image.config.v1+json", cfg),
		"layers":      []any{desc("application/vnd.oci.image.layer.v1.tar", layer)},
		"annotations": img.Labels,
	})
	if err != nil {
		return 0, fmt.Errorf("image manifest: %w", err)
	}
	m := desc("application/vnd.oci.image.manifest.v1+json", manifest)
	m["annotations"] = map[string]string{"io.containerd.image.name": img.Name,
		"org.opencontainers.image.ref.name": img.Name[strings.LastIndex(img.Name, ":")+1:]}
	m["platform"] = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []any{m}})
	if err != nil {
		return 0, fmt.Errorf("image index: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		b    []byte
	}{{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)}, {"index.json", index},
		{blob(manifest), manifest}, {blob(cfg), cfg}, {blob(layer), layer}} {
		if err := writeFile(tw, e.name, 0o644, e.b); err != nil {
			return 0, fmt.Errorf("image archive: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return 0, fmt.Errorf("image archive: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return 0, fmt.Errorf("image archive: %w", err)
	}
	return int64(len(layer)), nil
}

func desc(mediaType string, b []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func blob(b []byte) string { return "blobs/sha256/" + strings.TrimPrefix(digest(b), "sha256:") }

func writeFile(tw *tar.Writer, name string, mode int64, b []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(b)), Typeflag: tar.TypeReg, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := tw.Write(b)
	return err
}

// layerWriter writes the image's one layer: every entry's parent
// directories once, before the entry.
type layerWriter struct {
	tw   *tar.Writer
	made map[string]bool
}

// baseDirs are the directories made in every image (before img.Dirs).
func baseDirs() []string { return []string{"/dev", "/proc", "/sys", "/etc", "/tmp", "/run", "/var"} }

func layerTar(img Image) ([]byte, error) {
	var buf bytes.Buffer
	w := &layerWriter{tw: tar.NewWriter(&buf), made: map[string]bool{}}
	for _, d := range append(baseDirs(), img.Dirs...) {
		if err := w.mkdir(d); err != nil {
			return nil, err
		}
	}
	if err := w.addFiles(img.Files); err != nil {
		return nil, err
	}
	if err := w.addSymlinks(img.Symlinks); err != nil {
		return nil, err
	}
	if err := w.tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// dirChain lists d and its parents, outermost first ("/a/b" -> "/a", "/a/b").
func dirChain(d string) []string {
	var parts []string
	for p := path.Clean(d); p != "/" && p != "."; p = path.Dir(p) {
		parts = append(parts, p)
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return parts
}

// dirMode is a directory's permission bits (/tmp is world-writable and sticky).
func dirMode(d string) int64 {
	if d == "/tmp" {
		return 0o1777
	}
	return 0o755
}

// mkdir writes d and its parents, each the first time it is asked for.
func (w *layerWriter) mkdir(d string) error {
	for _, p := range dirChain(d) {
		if w.made[p] {
			continue
		}
		w.made[p] = true
		if err := w.tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(p, "/") + "/", Mode: dirMode(p), Typeflag: tar.TypeDir, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	return nil
}

// addFiles copies the host files in, sorted by their path in the image.
func (w *layerWriter) addFiles(files Files) error {
	for dst := range files {
		if !path.IsAbs(dst) {
			return fmt.Errorf("image path %q is not absolute", dst)
		}
	}
	for _, dst := range sortedKeys(files) {
		if err := w.addFile(dst, files[dst]); err != nil {
			return err
		}
	}
	return nil
}

func (w *layerWriter) addFile(dst, src string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("image file %s: %w", src, err)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("image file %s: %w", src, err)
	}
	if err := w.mkdir(path.Dir(dst)); err != nil {
		return err
	}
	return writeFile(w.tw, strings.TrimPrefix(dst, "/"), int64(fi.Mode().Perm()), b)
}

// addSymlinks writes the symlinks, sorted by their path in the image.
func (w *layerWriter) addSymlinks(links map[string]string) error {
	for _, l := range sortedKeys(links) {
		if !path.IsAbs(l) {
			return fmt.Errorf("image symlink %q is not absolute", l)
		}
		if err := w.mkdir(path.Dir(l)); err != nil {
			return err
		}
		if err := w.tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(l, "/"), Linkname: links[l], Typeflag: tar.TypeSymlink,
			Mode: 0o777, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
