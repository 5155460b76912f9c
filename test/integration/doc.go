// Package integration holds gpuslice's cluster tests against a real
// kube-apiserver, etcd and kube-scheduler started by the tests themselves
// (build tag "integration"; run with make test-cluster).
package integration
