//go:build nodee2e

package nodee2e

import (
	"fmt"

	"github.com/gpuslice/gpuslice/internal/ociimage"
)

// busyboxApplets are linked to /bin/busybox in an image that carries it.
var busyboxApplets = []string{"sh", "ls", "cat", "sleep", "echo"}

// buildImage writes an OCI image archive for ctr import (internal/ociimage):
// one uncompressed layer holding files, busybox applets and empty system directories.
func buildImage(path, name string, files ociimage.Files, entrypoint []string) error {
	img := ociimage.Image{Name: name, Files: files, Entrypoint: entrypoint, Dirs: []string{"/bin"}}
	if _, ok := files["/bin/busybox"]; ok {
		img.Symlinks = map[string]string{}
		for _, app := range busyboxApplets {
			img.Symlinks["/bin/"+app] = "busybox"
		}
	}
	if _, err := ociimage.Write(path, img); err != nil {
		return fmt.Errorf("image %s: %w", name, err)
	}
	return nil
}
