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

/* A device a process could enumerate: a whole GPU (ci -1) or a MIG device
 * (a compute instance: its GPU instance's slot and its id). */
struct cand {
	int dev, ci;
	const unsigned char *uuid;
};

#define SIM_MAX_CANDS (SIM_MAX_GPUS + SIM_MAX_DEVICES * SIM_MIG_MAX_CI)

static int match_uuid(const struct cand *c, int n, const char *tok, bool mig)
{
	char buf[64];
	int found = -1;

	for (int i = 0; i < n; i++) {
		if ((c[i].ci >= 0) != mig)
			continue;
		sim_format_uuid(c[i].uuid, buf, sizeof(buf));
		if (mig)
			memcpy(buf, "MIG-", 4);
		if (strncmp(buf, tok, strlen(tok)) != 0)
			continue;
		if (found >= 0)
			return -1; /* ambiguous prefix */
		found = i;
	}
	return found;
}

/* Index into c of a token, -1 if invalid. Indices count the devices a
 * process sees without CUDA_VISIBLE_DEVICES (def, ndef). */
static int parse_token(const struct cand *c, int n, const int *def, int ndef, const char *tok)
{
	char *end;
	long v;

	if (strncmp(tok, "GPU-", 4) == 0 || strncmp(tok, "MIG-", 4) == 0)
		return strlen(tok) > 4 ? match_uuid(c, n, tok, tok[0] == 'M') : -1;
	if (*tok < '0' || *tok > '9')
		return -1;
	v = strtol(tok, &end, 10);
	return (*end != '\0' || v >= ndef) ? -1 : def[v];
}

/* The MIG devices of a GPU in MIG mode, by GPU instance id, then compute
 * instance id (nvmlDeviceGetMigDeviceHandleByIndex's order). */
static int mig_cands(struct sim_state *st, int gpu, struct cand *c, int n)
{
	for (unsigned g = 0; g <= 2 * SIM_MIG_MAX_GI; g++) {
		struct sim_mig_gi *gi = sim_mig_gi_by_id(st, gpu, g);
		for (unsigned k = 0; gi != NULL && k <= 2 * SIM_MIG_MAX_CI && n < SIM_MAX_CANDS; k++) {
			struct sim_mig_ci *ci = sim_mig_ci_by_id(gi, k);
			if (ci != NULL)
				c[n++] = (struct cand){(int)gi->slot, (int)ci->id, ci->uuid};
		}
	}
	return n;
}

/* Like the driver (CUDA 11/12): a process enumerates at most one MIG device,
 * the first; whole GPUs besides it. CUDA_VISIBLE_DEVICES takes indices, GPU-
 * and MIG- UUIDs (or unique prefixes), comma separated; parsing stops at the
 * first invalid or repeated entry. Returns the number of visible devices. */
static int visible_devices(const struct cand *c, int n, struct cand *vis)
{
	const char *env = getenv("CUDA_VISIBLE_DEVICES");
	char buf[1024], *save = NULL, *tok;
	int nvis = 0, def[SIM_MAX_CANDS], ndef = 0;
	bool used[SIM_MAX_CANDS] = {false}, mig = false;

	for (int i = 0; i < n; i++)
		if (c[i].ci < 0 || !mig) {
			mig |= c[i].ci >= 0;
			def[ndef++] = i;
		}
	if (env == NULL) {
		for (int i = 0; i < ndef; i++)
			vis[nvis++] = c[def[i]];
		return nvis;
	}
	mig = false;
	snprintf(buf, sizeof(buf), "%s", env);
	for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
		tok += strspn(tok, " \t");
		tok[strcspn(tok, " \t")] = '\0';
		int i = parse_token(c, n, def, ndef, tok);
		if (i < 0 || used[i])
			break;
		used[i] = true;
		if (c[i].ci >= 0 && mig)
			continue; /* one MIG device per process */
		mig |= c[i].ci >= 0;
		vis[nvis++] = c[i];
	}
	return nvis;
}

static bool listed(const struct cand *c, int nvis)
{
	for (int o = 0; o < nvis; o++)
		if (sim_g.vis[o] == c->dev && sim_g.vis_ci[o] == c->ci)
			return true;
	return false;
}

/* Under sim_g.mu. Ordinals are append-only: the devices a fresh process would
 * now see (accessible, then CUDA_VISIBLE_DEVICES) that are not listed yet go
 * after the ones already listed, which keep their ordinals even if their node
 * went away (the real driver keeps the device files it opened). */
static int rescan_locked(void)
{
	static struct cand cand[SIM_MAX_CANDS], want[SIM_MAX_CANDS];
	int n = 0, nwant;
	int nvis = atomic_load_explicit(&sim_g.nvis, memory_order_relaxed);

	for (int i = 0; i < (int)sim_g.st->ndev && i < SIM_MAX_GPUS; i++) {
		if (!sim_device_accessible(sim_g.st, &sim_g.access, i))
			continue;
		if (sim_mig_on(sim_g.st, i))
			n = mig_cands(sim_g.st, i, cand, n);
		else
			cand[n++] = (struct cand){i, -1, sim_g.st->dev[i].uuid};
	}
	nwant = visible_devices(cand, n, want);
	for (int k = 0; k < nwant && nvis < SIM_MAX_DEVICES; k++)
		if (!listed(&want[k], nvis)) {
			sim_g.vis_ci[nvis] = want[k].ci;
			sim_g.vis[nvis++] = want[k].dev;
		}
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

int sim_device_ci(CUdevice ordinal)
{
	if (ordinal < 0 || ordinal >= atomic_load_explicit(&sim_g.nvis, memory_order_acquire))
		return -1;
	return sim_g.vis_ci[ordinal];
}

int sim_dev_ci(int dev)
{
	for (int o = 0, n = atomic_load_explicit(&sim_g.nvis, memory_order_acquire); o < n; o++)
		if (sim_g.vis[o] == dev)
			return sim_g.vis_ci[o];
	return -1;
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
