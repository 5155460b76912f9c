# gpuslice-node: the node agent (time-slice daemon, device plugin, table publisher,
# hot-plug reconciler), the gpuslice CLI and libgpuslice.so, which the agent
# installs onto the host at start (--install-library). glibc (the agent
# dlopens the driver's NVML) on a distroless base. Multi-arch: build with
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=$(git describe --tags --always) \
#     -f deploy/docker/gpuslice-node.Dockerfile -t <registry>/gpuslice-node:<tag> .
# (the C library is built natively per platform under emulation or on a
# native builder). The tests build the same image without a Docker engine (hack/images).
ARG GO_IMAGE=golang:1.26-bookworm
FROM ${GO_IMAGE} AS build
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make bin/gpuslice-node bin/gpuslice bin/libgpuslice.so bin/gpuslice-ctxprobe VERSION=${VERSION} && \
    strip --strip-debug bin/gpuslice-node bin/gpuslice bin/libgpuslice.so bin/gpuslice-ctxprobe

FROM gcr.io/distroless/base-debian12
ARG VERSION=dev
LABEL org.opencontainers.image.title="gpuslice-node" \
      org.opencontainers.image.description="gpuslice node agent, CLI and libgpuslice.so" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/gpuslice/gpuslice" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /src/bin/gpuslice-node /src/bin/gpuslice /src/bin/gpuslice-ctxprobe /usr/bin/
COPY --from=build /src/bin/libgpuslice.so /usr/lib/gpuslice/libgpuslice.so
ENTRYPOINT ["/usr/bin/gpuslice-node"]
