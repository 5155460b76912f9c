// Command images builds the gpuslice-scheduler and gpuslice-node images as
// OCI archives from the Makefile's outputs, without a container engine, with
// the layout and labels of deploy/docker/*.Dockerfile:
//
//	go run ./hack/images -bin bin -version V -registry R -tag T -out DIR
//
// writes DIR/gpuslice-scheduler.tar and DIR/gpuslice-node.tar (load them with
// `ctr -n k8s.io images import`) and prints each image's name and size.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/gpuslice/gpuslice/internal/ociimage"
)

func main() {
	bin := flag.String("bin", "bin", "directory of the built binaries")
	ver := flag.String("version", "dev", "version label")
	registry := flag.String("registry", "ghcr.io/gpuslice", "image registry/prefix")
	tag := flag.String("tag", "dev", "image tag")
	out := flag.String("out", "build/images", "output directory")
	flag.Parse()
	if err := run(*bin, *ver, *registry, *tag, *out); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func labels(title, desc, ver string) map[string]string {
	return map[string]string{"org.opencontainers.image.title": title, "org.opencontainers.image.description": desc,
		"org.opencontainers.image.version": ver, "org.opencontainers.image.source": "https://github.com/gpuslice/gpuslice",
		"org.opencontainers.image.licenses": "Apache-2.0"}
}

func run(bin, ver, registry, tag, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(out, ".strip-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// Debug symbols stripped, as the Dockerfiles do.
	s := map[string]string{}
	for _, b := range []string{"gpuslice-scheduler", "gpuslice-node", "gpuslice", "gpuslice-ctxprobe", "libgpuslice.so"} {
		s[b] = filepath.Join(tmp, b)
		if o, err := exec.Command("strip", "--strip-debug", "-o", s[b], filepath.Join(bin, b)).CombinedOutput(); err != nil {
			return fmt.Errorf("strip %s: %w: %s", b, err, o)
		}
	}
	sched := ociimage.Files{}
	if err := sched.AddWithLibs("/usr/bin/gpuslice-scheduler", s["gpuslice-scheduler"]); err != nil {
		return err
	}
	node := ociimage.Files{"/usr/lib/gpuslice/libgpuslice.so": s["libgpuslice.so"]}
	for _, b := range []string{"gpuslice-node", "gpuslice", "gpuslice-ctxprobe"} { // the time-slice daemon runs the probe beside it
		if err := node.AddWithLibs("/usr/bin/"+b, s[b]); err != nil {
			return err
		}
	}
	images := []ociimage.Image{
		{Name: registry + "/gpuslice-scheduler:" + tag, Files: sched, Entrypoint: []string{"/usr/bin/gpuslice-scheduler"},
			User: "65532:65532", Labels: labels("gpuslice-scheduler", "kube-scheduler with the gpuslice GPU-sharing plugin", ver)},
		{Name: registry + "/gpuslice-node:" + tag, Files: node, Entrypoint: []string{"/usr/bin/gpuslice-node"},
			Labels: labels("gpuslice-node", "gpuslice node agent, CLI and libgpuslice.so", ver)},
	}
	for _, img := range images {
		name := filepath.Base(img.Entrypoint[0])
		size, err := ociimage.Write(filepath.Join(out, name+".tar"), img)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Printf("image %s %.1f MiB\n", img.Name, float64(size)/(1<<20))
	}
	return nil
}
