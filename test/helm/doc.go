// Package helm tests the Helm chart deploy/helm/gpuslice: `helm lint`, and
// `helm template` for each values file in testdata against its golden
// rendering, every rendered object decoded strictly, the scheduler
// configuration loaded as kube-scheduler loads it, and the chart's CRD equal
// to deploy/crds. Run by `make test-helm` (build tag helmchart; the helm
// binary is built from source by hack/helm/build.sh). Regenerate the golden
// files with `make helm-golden`.
package helm
