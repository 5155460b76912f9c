//go:build nodee2e

package nodee2e

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// imageFiles maps paths in the image to host files (copied with their mode).
type imageFiles map[string]string

// addWithLibs adds a dynamically linked host binary at dst with every shared
// library ldd names, at the same paths as on the host.
func (f imageFiles) addWithLibs(dst, src string) error {
	f[dst] = src
	out, err := exec.Command("ldd", src).Output()
	if err != nil {
		return nil // static (ldd says "not a dynamic executable" and exits 1)
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		for _, p := range fields {
			if strings.HasPrefix(p, "/") {
				f[p] = p
			}
		}
	}
	return nil
}

// buildImage writes an OCI image archive for ctr import: one uncompressed
// layer holding files, busybox applets and empty system directories.
func buildImage(path, name string, files imageFiles, entrypoint []string) error {
	layer, err := layerTar(files)
	if err != nil {
		return err
	}
	layerDigest := digest(layer)
	cfg, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": entrypoint, "Env": []string{"PATH=/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return fmt.Errorf("image config: %w", err)
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(cfg), "size": len(cfg)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": len(layer)}},
	})
	if err != nil {
		return fmt.Errorf("image manifest: %w", err)
	}
	tag := name[strings.LastIndex(name, ":")+1:]
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest), "size": len(manifest),
		"annotations": map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag},
	}}})
	if err != nil {
		return fmt.Errorf("image index: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	for _, e := range []struct {
		name string
		b    []byte
	}{{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)}, {"index.json", index},
		{blob(manifest), manifest}, {blob(cfg), cfg}, {blob(layer), layer}} {
		if err := add(e.name, e.b); err != nil {
			return fmt.Errorf("image archive: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func blob(b []byte) string { return "blobs/sha256/" + strings.TrimPrefix(digest(b), "sha256:") }

func layerTar(files imageFiles) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	mkdir := func(d string) error {
		var parts []string
		for p := d; p != "/" && p != "."; p = filepath.Dir(p) {
			parts = append(parts, p)
		}
		for i := len(parts) - 1; i >= 0; i-- {
			if dirs[parts[i]] {
				continue
			}
			dirs[parts[i]] = true
			if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(parts[i], "/") + "/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, d := range []string{"/bin", "/dev", "/proc", "/sys", "/etc", "/tmp", "/run", "/var"} {
		if err := mkdir(d); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(files))
	for dst := range files {
		names = append(names, dst)
	}
	sort.Strings(names)
	for _, dst := range names {
		b, err := os.ReadFile(files[dst])
		if err != nil {
			return nil, fmt.Errorf("image file %s: %w", files[dst], err)
		}
		fi, err := os.Stat(files[dst])
		if err != nil {
			return nil, err
		}
		if err := mkdir(filepath.Dir(dst)); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(dst, "/"), Mode: int64(fi.Mode().Perm()), Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if _, ok := files["/bin/busybox"]; ok {
		for _, app := range []string{"sh", "ls", "cat", "sleep", "echo"} {
			if err := tw.WriteHeader(&tar.Header{Name: "bin/" + app, Linkname: "busybox", Typeflag: tar.TypeSymlink, Mode: 0o777}); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
