//go:build tools

// Package k8s pins the real Kubernetes binaries that gpuslice's integration
// tests and benchmarks run: they are built from source through the Go module
// proxy by build.sh, never downloaded prebuilt.
package k8s

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
