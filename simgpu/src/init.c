/* SPDX-License-Identifier: Apache-2.0
 * cuInit, process-wide state, device enumeration and CUDA_VISIBLE_DEVICES. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuapi.h"
#include "sim.h"

struct sim_global sim_g = {.mu = PTHREAD_MUTEX_INITIALIZER, .slot = -1};

static void on_fork_child(void)
{
	/* Like the real driver: CUDA is unusable in a forked child. */
	sim_g.forked = true;
}

static int match_uuid(const struct sim_state *st, const int *cand, int n, const char *tok)
{
	char buf[64];
	int found = -1;

	for (int i = 0; i < n; i++) {
		sim_format_uuid(st->dev[cand[i]].uuid, buf, sizeof(buf));
		if (strncmp(buf, tok, strlen(tok)) != 0)
			continue;
		if (found >= 0)
			return -1; /* ambiguous prefix */
		found = i;
	}
	return found;
}

static int parse_token(const struct sim_state *st, const int *cand, int n, const char *tok)
{
	char *end;
	long v;

	if (strncmp(tok, "GPU-", 4) == 0)
		return strlen(tok) > 4 ? match_uuid(st, cand, n, tok) : -1;
	if (*tok < '0' || *tok > '9')
		return -1;
	v = strtol(tok, &end, 10);
	return (*end != '\0' || v >= n) ? -1 : (int)v;
}

/* Applies CUDA_VISIBLE_DEVICES like the real driver: indices or UUID
 * (prefixes), comma separated; parsing stops at the first invalid or
 * repeated entry. Returns the number of visible devices. */
static int visible_devices(const struct sim_state *st, const int *cand, int n, int *vis)
{
	const char *env = getenv("CUDA_VISIBLE_DEVICES");
	char buf[1024], *save = NULL, *tok;
	int nvis = 0;
	bool used[SIM_MAX_DEVICES] = {false};

	if (env == NULL) {
		memcpy(vis, cand, sizeof(int) * (size_t)n);
		return n;
	}
	snprintf(buf, sizeof(buf), "%s", env);
	for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
		tok += strspn(tok, " \t");
		tok[strcspn(tok, " \t")] = '\0';
		int i = parse_token(st, cand, n, tok);
		if (i < 0 || used[i])
			break;
		used[i] = true;
		vis[nvis++] = cand[i];
	}
	return nvis;
}

static bool listed(int dev, int nvis)
{
	for (int o = 0; o < nvis; o++)
		if (sim_g.vis[o] == dev)
			return true;
	return false;
}

/* Under sim_g.mu. Ordinals are append-only: the devices a fresh process would
 * now see (accessible, then CUDA_VISIBLE_DEVICES) that are not listed yet go
 * after the ones already listed, which keep their ordinals even if their node
 * went away (the real driver keeps the device files it opened). */
static int rescan_locked(void)
{
	int cand[SIM_MAX_DEVICES], want[SIM_MAX_DEVICES], n = 0, nwant;
	int nvis = atomic_load_explicit(&sim_g.nvis, memory_order_relaxed);

	for (int i = 0; i < (int)sim_g.st->ndev && i < SIM_MAX_DEVICES; i++)
		if (sim_device_accessible(sim_g.st, &sim_g.access, i))
			cand[n++] = i;
	nwant = visible_devices(sim_g.st, cand, n, want);
	for (int k = 0; k < nwant && nvis < SIM_MAX_DEVICES; k++)
		if (!listed(want[k], nvis))
			sim_g.vis[nvis++] = want[k];
	atomic_store_explicit(&sim_g.nvis, nvis, memory_order_release);
	return nvis;
}

int sim_rescan_devices(void)
{
	int n;

	if (!sim_g.access.devnodes) /* nothing can change */
		return atomic_load(&sim_g.nvis);
	pthread_mutex_lock(&sim_g.mu);
	n = rescan_locked();
	pthread_mutex_unlock(&sim_g.mu);
	return n;
}

static CUresult do_init(void)
{
	struct sim_config *cfg = calloc(1, sizeof(*cfg));
	char err[SIM_ERR_LEN + 64];
	CUresult rc = CUDA_ERROR_NO_DEVICE;

	if (cfg == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (sim_config_from_env(cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "gpuslice: simulated GPU: bad configuration: %s\n", err);
		goto out;
	}
	sim_g.st = sim_state_open(cfg, err, sizeof(err));
	if (sim_g.st == NULL) {
		fprintf(stderr, "gpuslice: simulated GPU: %s\n", err);
		goto out;
	}
	sim_g.pid = sim_self_pid();
	sim_g.local_pid = (int32_t)getpid();
	sim_g.start = sim_proc_start_time(sim_g.pid);
	sim_g.access = cfg->access;
	sim_g.ctx_mem = cfg->ctx_mem;
	sim_g.copy_bps = cfg->copy_bps;
	sim_g.latency_ns = cfg->latency_ns;
	if (rescan_locked() > 0) {
		pthread_atfork(NULL, NULL, on_fork_child);
		rc = CUDA_SUCCESS;
	}
out:
	free(cfg);
	return rc;
}

SIM_API CUresult cuInit(unsigned int flags)
{
	CUresult rc;

	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (sim_g.forked)
		return CUDA_ERROR_NOT_INITIALIZED;
	pthread_mutex_lock(&sim_g.mu);
	if (!sim_g.inited) {
		sim_g.init_rc = do_init();
		atomic_store(&sim_g.inited, true);
	}
	rc = sim_g.init_rc;
	pthread_mutex_unlock(&sim_g.mu);
	return rc;
}

CUresult sim_check_init(void)
{
	if (!atomic_load(&sim_g.inited) || sim_g.forked)
		return CUDA_ERROR_NOT_INITIALIZED;
	return sim_g.init_rc;
}

int sim_device(CUdevice ordinal)
{
	if (ordinal < 0 || ordinal >= atomic_load_explicit(&sim_g.nvis, memory_order_acquire))
		return -1;
	return sim_g.vis[ordinal];
}

__attribute__((destructor)) static void sim_fini(void)
{
	/* The real driver frees a process's memory at exit. */
	if (sim_g.inited && sim_g.st != NULL && sim_g.slot >= 0 && sim_g.local_pid == (int32_t)getpid())
		sim_proc_release(sim_g.st, sim_g.slot, sim_g.pid);
}

SIM_API CUresult cuDriverGetVersion(int *v)
{
	if (v == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*v = SIM_DRIVER_VERSION;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
	(void)id;
	if (table != NULL)
		*table = NULL;
	return CUDA_ERROR_NOT_SUPPORTED; /* undocumented tables: see README.md */
}

SIM_API CUresult cuProfilerStart(void)
{
	return sim_check_init();
}

SIM_API CUresult cuProfilerStop(void)
{
	return sim_check_init();
}
