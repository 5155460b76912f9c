# gpuslice-scheduler: kube-scheduler with the GPUSlice plugin (glibc, as the
# Makefile builds it, on a distroless, non-root base). Multi-arch: build with
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=$(git describe --tags --always) \
#     -f deploy/docker/gpuslice-scheduler.Dockerfile -t <registry>/gpuslice-scheduler:<tag> .
# The tests build the same image without a Docker engine (hack/images).
ARG GO_IMAGE=golang:1.26-bookworm
FROM ${GO_IMAGE} AS build
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make bin/gpuslice-scheduler VERSION=${VERSION} && strip --strip-debug bin/gpuslice-scheduler

FROM gcr.io/distroless/base-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="gpuslice-scheduler" \
      org.opencontainers.image.description="kube-scheduler with the gpuslice GPU-sharing plugin" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/gpuslice/gpuslice" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /src/bin/gpuslice-scheduler /usr/bin/gpuslice-scheduler
USER 65532:65532
ENTRYPOINT ["/usr/bin/gpuslice-scheduler"]
