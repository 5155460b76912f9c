/* SPDX-License-Identifier: Apache-2.0
 * Copies and memsets. Device memory has no host backing: ranges are checked
 * against the allocation table, writes to it are dropped and reads from it
 * return zeros. Managed and pinned host memory are real host memory.
 * Work that stays on the device (device-to-device and peer copies, memsets of
 * device memory) runs on the device's engine, in stream order, for its bytes
 * at GPUSLICE_SIM_COPY_GBPS, shared with every process's kernels as a GPU's
 * SMs and copy bandwidth are; a synchronous one returns when it has run. */
#include <string.h>

#include "alloc.h"
#include "cuapi.h"

/* One side of a copy: a host address to touch, or NULL for device memory. */
struct side {
	char *host;
};

/* A device-side pointer (unified addressing): must lie in a known range;
 * managed/host kinds resolve to host memory. */
static CUresult dev_side(CUdeviceptr p, size_t n, struct side *s)
{
	struct sim_alloc a;

	if (n == 0) {
		s->host = NULL;
		return CUDA_SUCCESS;
	}
	if (!sim_alloc_find(p, &a) || n > a.size - (p - a.base))
		return CUDA_ERROR_INVALID_VALUE;
	s->host = (a.kind == SIM_AK_MANAGED || a.kind == SIM_AK_HOST) ? (char *)(uintptr_t)p : NULL;
	return CUDA_SUCCESS;
}

/* cuMemcpy's unified pointers may also be plain pageable host memory. */
static CUresult any_side(CUdeviceptr p, size_t n, struct side *s)
{
	struct sim_alloc a;

	if (n > 0 && !sim_alloc_find(p, &a)) {
		if (p == 0)
			return CUDA_ERROR_INVALID_VALUE;
		s->host = (char *)(uintptr_t)p;
		return CUDA_SUCCESS;
	}
	return dev_side(p, n, s);
}

static void move_bytes(struct side d, struct side s, size_t n)
{
	if (d.host == NULL || n == 0)
		return;
	if (s.host != NULL)
		memmove(d.host, s.host, n);
	else
		memset(d.host, 0, n);
}

/* Resolves the stream and, for synchronous copies, waits for prior work. */
static CUresult copy_begin(CUstream hs, bool sync, struct sim_stream **s, bool *captured)
{
	CUresult rc = sim_stream_resolve(hs, s);

	*captured = false;
	if (rc != CUDA_SUCCESS)
		return rc;
	if (sim_stream_capturing(*s)) {
		*captured = true;
		return sync ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
	}
	if (sync)
		sim_queue_wait(&(*s)->ctx->q, atomic_load(&(*s)->last));
	return CUDA_SUCCESS;
}

/* The engine time of bytes that stay on the device. */
static uint64_t engine_ns(uint64_t bytes)
{
	uint64_t bps = sim_g.copy_bps != 0 ? sim_g.copy_bps : SIM_DEFAULT_COPY_GBPS * 1000000000ull;
	uint64_t ns = (uint64_t)((double)bytes * 1e9 / (double)bps);
	return ns > SIM_MAX_BUSY_US * 1000ull ? SIM_MAX_BUSY_US * 1000ull : ns;
}

/* Queues the engine work of device_bytes on s (a node when captured); a
 * synchronous call waits until it has run. */
static CUresult copy_end(struct sim_stream *s, uint64_t device_bytes, bool sync, bool captured)
{
	struct sim_item it = {.kind = SIM_ITEM_KERNEL, .busy_ns = engine_ns(device_bytes)};
	CUresult rc;

	if (it.busy_ns == 0 && !captured)
		return CUDA_SUCCESS;
	if (it.busy_ns == 0)
		it.kind = SIM_ITEM_NOP;
	rc = sim_stream_submit(s, &it);
	if (rc == CUDA_SUCCESS && sync)
		sim_queue_wait(&s->ctx->q, atomic_load(&s->last));
	return rc;
}

static CUresult copy(CUdeviceptr d, bool d_any, CUdeviceptr s, bool s_any, size_t n, CUstream st, bool sync)
{
	struct side ds = {0}, ss = {0};
	struct sim_stream *str;
	bool captured;
	CUresult rc = copy_begin(st, sync, &str, &captured);

	if (rc == CUDA_SUCCESS)
		rc = d_any ? any_side(d, n, &ds) : dev_side(d, n, &ds);
	if (rc == CUDA_SUCCESS)
		rc = s_any ? any_side(s, n, &ss) : dev_side(s, n, &ss);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!captured)
		move_bytes(ds, ss, n);
	return copy_end(str, ds.host == NULL && ss.host == NULL ? n : 0, sync, captured);
}

static CUresult htod(CUdeviceptr d, const void *s, size_t n, CUstream st, bool sync)
{
	if (s == NULL && n > 0)
		return CUDA_ERROR_INVALID_VALUE;
	return copy(d, false, (CUdeviceptr)(uintptr_t)s, true, n, st, sync);
}

static CUresult dtoh(void *d, CUdeviceptr s, size_t n, CUstream st, bool sync)
{
	if (d == NULL && n > 0)
		return CUDA_ERROR_INVALID_VALUE;
	return copy((CUdeviceptr)(uintptr_t)d, true, s, false, n, st, sync);
}

#define LEGACY NULL
SIM_API CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n)
{
	return copy(d, true, s, true, n, LEGACY, true);
}
SIM_API CUresult cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n)
{
	return copy(d, true, s, true, n, CU_STREAM_PER_THREAD, true);
}
SIM_API CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
	return copy(d, true, s, true, n, st, false);
}
SIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
	return copy(d, true, s, true, n, SIM_PT(st), false);
}
SIM_API CUresult cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n)
{
	(void)dc, (void)sc;
	return copy(d, false, s, false, n, LEGACY, true);
}
SIM_API CUresult cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st)
{
	(void)dc, (void)sc;
	return copy(d, false, s, false, n, st, false);
}
SIM_API CUresult cuMemcpyPeer_ptds(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n)
{
	(void)dc, (void)sc;
	return copy(d, false, s, false, n, CU_STREAM_PER_THREAD, true);
}
SIM_API CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st)
{
	(void)dc, (void)sc;
	return copy(d, false, s, false, n, SIM_PT(st), false);
}
SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n)
{
	return htod(d, s, n, LEGACY, true);
}
SIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n)
{
	return htod(d, s, n, CU_STREAM_PER_THREAD, true);
}
SIM_API CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n)
{
	return dtoh(d, s, n, LEGACY, true);
}
SIM_API CUresult cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n)
{
	return dtoh(d, s, n, CU_STREAM_PER_THREAD, true);
}
SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n)
{
	return copy(d, false, s, false, n, LEGACY, true);
}
SIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n)
{
	return copy(d, false, s, false, n, CU_STREAM_PER_THREAD, true);
}
SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st)
{
	return htod(d, s, n, st, false);
}
SIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st)
{
	return htod(d, s, n, SIM_PT(st), false);
}
SIM_API CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st)
{
	return dtoh(d, s, n, st, false);
}
SIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream st)
{
	return dtoh(d, s, n, SIM_PT(st), false);
}
SIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
	return copy(d, false, s, false, n, st, false);
}
SIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
	return copy(d, false, s, false, n, SIM_PT(st), false);
}

/* One 2D side: checks every row's range and resolves host memory. */
static CUresult side_2d(CUmemorytype t, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t pitch, size_t w,
			size_t h, struct side *s, size_t *pitch_out)
{
	size_t span;

	if (h == 0 || w == 0)
		return CUDA_SUCCESS;
	if ((h > 1 && pitch < x + w) || (pitch != 0 && y > SIZE_MAX / pitch))
		return CUDA_ERROR_INVALID_VALUE;
	span = (y + h - 1) * pitch + x + w;
	*pitch_out = pitch;
	if (t == CU_MEMORYTYPE_HOST) {
		if (host == NULL)
			return CUDA_ERROR_INVALID_VALUE;
		s->host = (char *)(uintptr_t)host;
		return CUDA_SUCCESS;
	}
	if (t != CU_MEMORYTYPE_DEVICE && t != CU_MEMORYTYPE_UNIFIED)
		return CUDA_ERROR_INVALID_VALUE; /* arrays have no content here */
	return t == CU_MEMORYTYPE_UNIFIED ? any_side(dev, span, s) : dev_side(dev, span, s);
}

static CUresult copy_2d(const CUDA_MEMCPY2D *c, CUstream st, bool sync)
{
	struct side d = {0}, s = {0};
	size_t dp = 0, sp = 0;
	struct sim_stream *str = NULL;
	bool captured = false;
	CUresult rc = c == NULL ? CUDA_ERROR_INVALID_VALUE : copy_begin(st, sync, &str, &captured);

	if (rc == CUDA_SUCCESS)
		rc = side_2d(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstPitch,
			     c->WidthInBytes, c->Height, &d, &dp);
	if (rc == CUDA_SUCCESS)
		rc = side_2d(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcPitch,
			     c->WidthInBytes, c->Height, &s, &sp);
	if (rc != CUDA_SUCCESS)
		return rc;
	for (size_t r = 0; !captured && d.host != NULL && r < c->Height; r++) {
		struct side dr = {d.host + (c->dstY + r) * dp + c->dstXInBytes};
		struct side sr = {s.host ? s.host + (c->srcY + r) * sp + c->srcXInBytes : NULL};
		move_bytes(dr, sr, c->WidthInBytes);
	}
	return copy_end(str, d.host == NULL && s.host == NULL ? (uint64_t)c->WidthInBytes * c->Height : 0, sync,
			captured);
}

SIM_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c)
{
	return copy_2d(c, LEGACY, true);
}
SIM_API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *c)
{
	return copy_2d(c, CU_STREAM_PER_THREAD, true);
}
SIM_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream st)
{
	return copy_2d(c, st, false);
}
SIM_API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *c, CUstream st)
{
	return copy_2d(c, SIM_PT(st), false);
}

static CUresult set(CUdeviceptr d, size_t pitch, unsigned v, unsigned esz, size_t w, size_t h, CUstream st, bool sync)
{
	struct side s = {0};
	struct sim_stream *str;
	bool captured;
	CUresult rc = copy_begin(st, sync, &str, &captured);
	size_t span;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (w == 0 || h == 0)
		return copy_end(str, 0, sync, captured);
	if ((h > 1 && pitch < w * esz) || w > SIZE_MAX / esz || (h > 1 && h - 1 > SIZE_MAX / pitch))
		return CUDA_ERROR_INVALID_VALUE;
	span = (h - 1) * pitch + w * esz;
	rc = dev_side(d, span, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (s.host != NULL && !captured)
		for (size_t r = 0; r < h; r++)
			for (size_t i = 0; i < w; i++)
				memcpy(s.host + r * pitch + i * esz, &v, esz); /* little endian */
	return copy_end(str, s.host == NULL ? (uint64_t)w * esz * h : 0, sync, captured);
}

SIM_API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
	return set(d, 0, v, 1, n, 1, LEGACY, true);
}
SIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n)
{
	return set(d, 0, v, 1, n, 1, CU_STREAM_PER_THREAD, true);
}
SIM_API CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n)
{
	return set(d, 0, v, 2, n, 1, LEGACY, true);
}
SIM_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n)
{
	return set(d, 0, v, 2, n, 1, CU_STREAM_PER_THREAD, true);
}
SIM_API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n)
{
	return set(d, 0, v, 4, n, 1, LEGACY, true);
}
SIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n)
{
	return set(d, 0, v, 4, n, 1, CU_STREAM_PER_THREAD, true);
}
SIM_API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st)
{
	return set(d, 0, v, 1, n, 1, st, false);
}
SIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream st)
{
	return set(d, 0, v, 1, n, 1, SIM_PT(st), false);
}
SIM_API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream st)
{
	return set(d, 0, v, 2, n, 1, st, false);
}
SIM_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream st)
{
	return set(d, 0, v, 2, n, 1, SIM_PT(st), false);
}
SIM_API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream st)
{
	return set(d, 0, v, 4, n, 1, st, false);
}
SIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream st)
{
	return set(d, 0, v, 4, n, 1, SIM_PT(st), false);
}
SIM_API CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h)
{
	return set(d, p, v, 1, w, h, LEGACY, true);
}
SIM_API CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h)
{
	return set(d, p, v, 1, w, h, CU_STREAM_PER_THREAD, true);
}
SIM_API CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream st)
{
	return set(d, p, v, 1, w, h, st, false);
}
SIM_API CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream st)
{
	return set(d, p, v, 1, w, h, SIM_PT(st), false);
}

CUresult sim_copy_engine(CUstream hs, uint64_t bytes)
{
	struct sim_stream *s;
	bool captured;
	CUresult rc = copy_begin(hs, false, &s, &captured);

	return rc != CUDA_SUCCESS ? rc : copy_end(s, bytes, false, captured);
}
