/* SPDX-License-Identifier: Apache-2.0
 * Simulated NVML events: event sets, per-device registration and waiting for
 * the events posted in the shared state (gpuslice-sim-ctl xid). Only XID
 * critical errors are supported, like a board without ECC events. Events
 * posted before a set was created are not delivered; a set that falls more
 * than SIM_EVENT_SLOTS events behind loses the oldest. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "nvml.h"

#define SIM_EVENT_SET_MAGIC 0x45564e54u
#define SIM_SUPPORTED_EVENTS nvmlEventTypeXidCriticalError

struct nvmlEventSet_st {
	unsigned magic;
	pthread_mutex_t mu;
	uint32_t next;                             /* number of the next event to read */
	unsigned long long types[SIM_MAX_DEVICES]; /* registered types by simulator device */
};

static struct nvmlEventSet_st *set_of(nvmlEventSet_t s)
{
	return s != NULL && s->magic == SIM_EVENT_SET_MAGIC ? s : NULL;
}

NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *out)
{
	nvmlReturn_t rc = sim_nvml_check();
	struct nvmlEventSet_st *s;

	if (rc != NVML_SUCCESS)
		return rc;
	if (out == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return NVML_ERROR_MEMORY;
	pthread_mutex_init(&s->mu, NULL);
	s->next = atomic_load(&sim_nvml.st->events.posted);
	s->magic = SIM_EVENT_SET_MAGIC;
	*out = s;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	struct nvmlEventSet_st *s = set_of(set);

	if (s == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	s->magic = 0;
	pthread_mutex_destroy(&s->mu);
	free(s);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t h, unsigned long long *types)
{
	nvmlReturn_t rc = sim_nvml_check();

	if (rc != NVML_SUCCESS)
		return rc;
	if (sim_nvml_dev(h, NULL) == NULL || types == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*types = SIM_SUPPORTED_EVENTS;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t h, unsigned long long types, nvmlEventSet_t set)
{
	struct nvmlEventSet_st *s = set_of(set);
	nvmlReturn_t rc = sim_nvml_check();
	int idx;

	if (rc != NVML_SUCCESS)
		return rc;
	if (sim_nvml_dev(h, &idx) == NULL || s == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (types & ~SIM_SUPPORTED_EVENTS)
		return NVML_ERROR_NOT_SUPPORTED;
	pthread_mutex_lock(&s->mu);
	s->types[idx] |= types;
	pthread_mutex_unlock(&s->mu);
	return NVML_SUCCESS;
}

/* This process's handle of simulator device dev, or NULL if it does not list it. */
static nvmlDevice_t handle_of(uint32_t dev)
{
	for (int i = 0, n = atomic_load(&sim_nvml.ndev); i < n; i++)
		if (sim_nvml.dev[i].index == (int)dev)
			return (nvmlDevice_t)&sim_nvml.dev[i];
	return NULL;
}

/* Under s->mu: the next posted event the set registered for, if any. */
static bool next_event(struct nvmlEventSet_st *s, uint32_t posted, struct sim_nvml_event *out, nvmlDevice_t *h)
{
	struct sim_nvml_events *ev = &sim_nvml.st->events;

	if (posted - s->next > SIM_EVENT_SLOTS)
		s->next = posted - SIM_EVENT_SLOTS; /* overwritten before it was read */
	while (s->next != posted) {
		uint32_t k = s->next++;
		struct sim_nvml_event *e = &ev->ring[k % SIM_EVENT_SLOTS];
		uint64_t seq = atomic_load(&e->seq);
		*out = (struct sim_nvml_event){.dev = e->dev, .type = e->type, .data = e->data};
		if (seq != (uint64_t)k + 1 || atomic_load(&e->seq) != seq || out->dev >= SIM_MAX_DEVICES)
			continue; /* overwritten meanwhile */
		if ((s->types[out->dev] & out->type) && (*h = handle_of(out->dev)) != NULL)
			return true;
	}
	return false;
}

static nvmlReturn_t wait_event(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms, bool v2)
{
	struct nvmlEventSet_st *s = set_of(set);
	nvmlReturn_t rc = sim_nvml_check();
	uint64_t deadline = sim_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	struct sim_nvml_event e;
	nvmlDevice_t h = NULL;
	int saved = errno;

	if (rc != NVML_SUCCESS)
		return rc;
	if (s == NULL || data == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (;;) {
		_Atomic uint32_t *word = &sim_nvml.st->events.posted;
		uint32_t posted = atomic_load(word);
		pthread_mutex_lock(&s->mu);
		bool got = next_event(s, posted, &e, &h);
		pthread_mutex_unlock(&s->mu);
		if (got)
			break;
		uint64_t now = sim_now_ns();
		if (now >= deadline) {
			errno = saved;
			return NVML_ERROR_TIMEOUT;
		}
		uint64_t left = deadline - now;
		struct timespec ts = {.tv_sec = (time_t)(left / 1000000000ull),
				      .tv_nsec = (long)(left % 1000000000ull)};
		syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, posted, &ts, NULL, 0);
	}
	errno = saved;
	data->device = h;
	data->eventType = e.type;
	data->eventData = e.data;
	if (v2) {                                  /* the v1 structure ends after eventData */
		data->gpuInstanceId = 0xffffffffu; /* no MIG */
		data->computeInstanceId = 0xffffffffu;
	}
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
	return wait_event(set, data, timeoutms, false);
}

NVML_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
	return wait_event(set, data, timeoutms, true);
}
