/* SPDX-License-Identifier: Apache-2.0
 * Elastic memory: borrows from the time-slice daemon, managed allocations past the
 * guarantee, spill orders (elastic.h). */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "account.h"
#include "config.h"
#include "hot.h"
#include "elastic.h"
#include "gate_wire.h"
#include "group.h"
#include "log.h"

#define GS_MANAGED_MAX 4096
#define GS_BORROW_WAIT_S 30 /* longer than the daemon's reclaim wait */

struct managed {
	CUdeviceptr ptr; /* 0: free entry */
	uint64_t size, spilled;
	CUcontext ctx;
	int slot;
};

static struct {
	pthread_mutex_t mu; /* one request at a time: fd, pid, replied, reply */
	pthread_cond_t cv;
	int fd;
	pid_t pid;
	int replied;
	struct gs_msg_lend reply;
	pthread_mutex_t tmu; /* the managed table */
	struct managed tab[GS_MANAGED_MAX];
	/* the count of managed allocations: gs_hot.elastic_managed */
	_Atomic int said_refused, said_conn, said_full;
} em = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .fd = -1, .tmu = PTHREAD_MUTEX_INITIALIZER};

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* "GPU-xxxxxxxx-xxxx-..." -> 16 bytes: 0, or -1. */
static int uuid_parse(const char *s, uint8_t out[16])
{
	if (strncmp(s, "GPU-", 4) == 0)
		s += 4;
	int n = 0;
	for (; *s != '\0' && n < 32; s++) {
		if (*s == '-')
			continue;
		int v = hexval(*s);
		if (v < 0)
			return -1;
		out[n / 2] = (uint8_t)(n % 2 == 0 ? v << 4 : out[n / 2] | v);
		n++;
	}
	return n == 32 && *s == '\0' ? 0 : -1;
}

/* The next process slot from from on whose GPU is gpu, in any of this
 * process's groups (its own and its device groups: a spill order names the
 * GPU, not the group): its GPU slot (*slot set), or NULL. */
static struct gs_shm_gpu *slot_of(const uint8_t gpu[16], int from, int *slot)
{
	struct gs_group *g = gs_group_get();
	if (g == NULL)
		return NULL;
	for (int s = from; s < GS_PROC_SLOTS; s++) {
		struct gs_shm_file *f = s < GS_SHM_MAX_GPUS ? gs_group_file(g)
							    : atomic_load_explicit(&gs_ghot.file[gs_slot_group(s)],
										   memory_order_acquire);
		uint8_t u[16];
		if (f != NULL && gs_ld32(&f->gpu[gs_slot_gpu(s)].state) == GS_SLOT_READY &&
		    uuid_parse(f->gpu[gs_slot_gpu(s)].uuid, u) == 0 && memcmp(u, gpu, 16) == 0) {
			*slot = s;
			return &f->gpu[gs_slot_gpu(s)];
		}
	}
	return NULL;
}

/* Moves up to want bytes of this process's managed memory on process slot
 * slot to the host, never taking the group below its guarantee: what is left
 * of want. Under em.tmu. */
static uint64_t spill_slot(struct gs_shm_gpu *gpu, int slot, uint64_t want)
{
	gs_fn_cuMemAdvise advise = GS_REAL(cuMemAdvise);
	gs_fn_cuMemPrefetchAsync prefetch = GS_REAL(cuMemPrefetchAsync);
	gs_fn_cuCtxSetCurrent set = GS_REAL(cuCtxSetCurrent);
	gs_fn_cuCtxSynchronize sync = GS_REAL(cuCtxSynchronize);
	if (advise == NULL || prefetch == NULL || set == NULL || sync == NULL)
		return want;
	for (int i = 0; i < GS_MANAGED_MAX && want > 0; i++) {
		struct managed *e = &em.tab[i];
		if (e->ptr == 0 || e->slot != slot || e->spilled >= e->size)
			continue;
		uint64_t dev = gs_ld64(&gpu->used) - gs_ld64(&gpu->spilled), min = gs_ld64(&gpu->min);
		uint64_t room = dev > min ? dev - min : 0;
		uint64_t n = e->size - e->spilled;
		n = n < want ? n : want;
		n = n < room ? n : room;
		if (n == 0)
			break;
		CUdeviceptr at = e->ptr + e->spilled;
		if (set(e->ctx) != CUDA_SUCCESS || advise(at, n, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_DEVICE_CPU) ||
		    prefetch(at, n, CU_DEVICE_CPU, NULL) != CUDA_SUCCESS || sync() != CUDA_SUCCESS)
			continue;
		e->spilled += n;
		__atomic_fetch_add(&gpu->spilled, n, __ATOMIC_ACQ_REL);
		want -= n;
	}
	return want;
}

/* Moves up to the order's bytes of this process's managed memory on its GPU
 * to the host, whichever of the process's groups that GPU is in. */
static void spill(const struct gs_msg_spill *m)
{
	uint64_t want = m->bytes;
	struct gs_shm_gpu *gpu;
	pthread_mutex_lock(&em.tmu);
	for (int slot = -1; want > 0 && (gpu = slot_of(m->gpu, slot + 1, &slot)) != NULL;)
		want = spill_slot(gpu, slot, want);
	pthread_mutex_unlock(&em.tmu);
}

/* The reader: answers to requests, and spill orders. Ends when the
 * connection does (the next request reconnects). */
static void *reader(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct gs_frame f;
	while (gs_wire_recv(fd, &f, 0) == 0) {
		if (f.header.type == GS_MSG_SPILL) {
			spill(&f.msg.spill);
		} else if (f.header.type == GS_MSG_LEND) {
			pthread_mutex_lock(&em.mu);
			em.reply = f.msg.lend;
			em.replied = 1;
			pthread_cond_broadcast(&em.cv);
			pthread_mutex_unlock(&em.mu);
		}
	}
	pthread_mutex_lock(&em.mu);
	if (em.fd == fd)
		em.fd = -1;
	pthread_cond_broadcast(&em.cv);
	pthread_mutex_unlock(&em.mu);
	close(fd);
	return NULL;
}

/* Connects and says hello (called with em.mu held): 0 or -1. */
static int connect_locked(void)
{
	if (em.fd >= 0 && em.pid == getpid())
		return 0;
	const char *path = gs_config()->node_socket;
	if (path[0] == '\0')
		return -1;
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	memcpy(addr.sun_path, path, strlen(path));
	int fd = socket(AF_UNIX, GS_PROTO_SOCK_TYPE | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct timeval tv = {.tv_sec = 5}, none = {0};
	struct gs_frame f;
	struct gs_msg_hello h = {.features = 0};
	gs_wire_frame(&f, GS_MSG_HELLO, &h, sizeof(h));
	pthread_t t;
	pthread_attr_t attr;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
	    connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || gs_wire_send(fd, &f) != 0 ||
	    gs_wire_recv(fd, &f, 0) != 0 || f.header.type != GS_MSG_WELCOME ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none)) != 0 || pthread_attr_init(&attr) != 0) {
		close(fd);
		return -1;
	}
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(&t, &attr, reader, (void *)(intptr_t)fd);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		close(fd);
		return -1;
	}
	em.fd = fd;
	em.pid = getpid();
	return 0;
}

/* One request and its answer: 0 (reply filled) or -1 (no daemon). */
static int request(const struct gs_msg_borrow *b, struct gs_msg_lend *reply)
{
	pthread_mutex_lock(&em.mu);
	int rc = -1;
	struct gs_frame f;
	gs_wire_frame(&f, GS_MSG_BORROW, b, sizeof(*b));
	if (connect_locked() == 0) {
		int fd = em.fd;
		em.replied = 0;
		if (gs_wire_send(fd, &f) == 0) {
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += GS_BORROW_WAIT_S;
			while (!em.replied && em.fd == fd &&
			       pthread_cond_timedwait(&em.cv, &em.mu, &until) != ETIMEDOUT)
				;
			if (em.replied) {
				*reply = em.reply;
				rc = 0;
			}
		}
	}
	pthread_mutex_unlock(&em.mu);
	return rc;
}

GS_HIDDEN int gs_elastic_borrow(struct gs_shm_gpu *gpu, uint64_t size, int reclaim)
{
	int saved = errno;
	struct gs_msg_borrow b = {.size = size, .flags = reclaim ? GS_BORROW_RECLAIM : 0};
	struct gs_msg_lend reply;
	char want[32];
	gs_fmt_size(want, sizeof(want), size);
	int rc = -1;
	if (uuid_parse(gpu->uuid, b.gpu) != 0 || request(&b, &reply) != 0) {
		gs_log_once(&em.said_conn,
			    "allocation of %s on %s past the group's guarantee: no node daemon to borrow from", want,
			    gpu->uuid);
	} else if (reply.status == GS_LEND_GRANTED) {
		rc = 0;
	} else {
		reply.message[sizeof(reply.message) - 1] = '\0';
		gs_log_once(&em.said_refused, "allocation of %s on %s %s: %s", want, gpu->uuid,
			    reclaim ? "within the guarantee found no room" : "past the group's allowance refused",
			    reply.message);
	}
	errno = saved;
	return rc;
}

static _Atomic uint64_t view_avail[GS_PROC_SLOTS], view_at[GS_PROC_SLOTS]; /* by process slot */

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

GS_HIDDEN uint64_t gs_elastic_view_limit(struct gs_shm_gpu *gpu, int slot)
{
	uint64_t limit = gs_ld64(&gpu->limit);
	if ((__atomic_load_n(&gpu->elastic, __ATOMIC_ACQUIRE) & GS_ELASTIC_ON) == 0 || slot < 0 ||
	    slot >= GS_PROC_SLOTS)
		return limit;
	uint64_t now = mono_ns(), at = atomic_load(&view_at[slot]);
	if (at == 0 || now - at > 100000000ull) { /* ask at most every 100 ms */
		int saved = errno;
		struct gs_msg_borrow b = {.size = 0};
		struct gs_msg_lend reply;
		if (uuid_parse(gpu->uuid, b.gpu) == 0 && request(&b, &reply) == 0 && reply.status == GS_LEND_GRANTED)
			atomic_store(&view_avail[slot], reply.available);
		atomic_store(&view_at[slot], now);
		errno = saved;
	}
	uint64_t avail = atomic_load(&view_avail[slot]);
	return avail > limit ? avail : limit;
}

GS_HIDDEN int gs_elastic_wants_managed(const struct gs_shm_gpu *gpu, uint64_t used_after)
{
	uint32_t fl = __atomic_load_n(&gpu->elastic, __ATOMIC_ACQUIRE);
	return (fl & GS_ELASTIC_SPILL) != 0 && used_after > gs_ld64(&gpu->min);
}

GS_HIDDEN CUresult gs_elastic_alloc_managed(CUdeviceptr *dptr, size_t size, CUdevice dev, int slot)
{
	gs_fn_cuMemAllocManaged alloc = GS_REAL(cuMemAllocManaged);
	gs_fn_cuMemAdvise advise = GS_REAL(cuMemAdvise);
	gs_fn_cuCtxGetCurrent cur = GS_REAL(cuCtxGetCurrent);
	if (alloc == NULL || advise == NULL || cur == NULL || dptr == NULL)
		return CUDA_ERROR_NOT_FOUND;
	CUcontext ctx = NULL;
	CUresult rc = cur(&ctx);
	if (rc == CUDA_SUCCESS)
		rc = alloc(dptr, size, CU_MEM_ATTACH_GLOBAL);
	if (rc != CUDA_SUCCESS)
		return rc;
	/* Prefer the device; stay mapped there once spilled (no migration back). */
	(void)advise(*dptr, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev);
	(void)advise(*dptr, size, CU_MEM_ADVISE_SET_ACCESSED_BY, dev);
	pthread_mutex_lock(&em.tmu);
	int i = 0;
	while (i < GS_MANAGED_MAX && em.tab[i].ptr != 0)
		i++;
	if (i < GS_MANAGED_MAX) {
		em.tab[i] = (struct managed){.ptr = *dptr, .size = size, .ctx = ctx, .slot = slot};
		atomic_fetch_add(&gs_hot.elastic_managed, 1);
		if (gs_group_get() != NULL)
			__atomic_fetch_add(&gs_group_slot(slot)->managed, size, __ATOMIC_ACQ_REL);
	}
	pthread_mutex_unlock(&em.tmu);
	if (i == GS_MANAGED_MAX)
		gs_log_once(&em.said_full, "more than %d managed allocations: later ones cannot spill", GS_MANAGED_MAX);
	return CUDA_SUCCESS;
}

GS_HIDDEN void gs_elastic_freed_slow(CUdeviceptr ptr)
{
	if (ptr == 0)
		return;
	pthread_mutex_lock(&em.tmu);
	for (int i = 0; i < GS_MANAGED_MAX; i++) {
		struct managed *e = &em.tab[i];
		if (e->ptr != ptr)
			continue;
		if (gs_group_get() != NULL) {
			struct gs_shm_gpu *gpu = gs_group_slot(e->slot);
			__atomic_fetch_sub(&gpu->managed, e->size, __ATOMIC_ACQ_REL);
			__atomic_fetch_sub(&gpu->spilled, e->spilled, __ATOMIC_ACQ_REL);
		}
		*e = (struct managed){0};
		atomic_fetch_sub(&gs_hot.elastic_managed, 1);
		break;
	}
	pthread_mutex_unlock(&em.tmu);
}
