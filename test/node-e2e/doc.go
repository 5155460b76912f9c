// Package nodee2e is gpuslice's end-to-end test on one real node: etcd,
// kube-apiserver, gpuslice-scheduler, kubelet, containerd and runc, all
// started by the test (root only; build tag nodee2e, run by make
// e2e-hotplug). See docs/node-agent.md.
package nodee2e
