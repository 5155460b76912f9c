/* SPDX-License-Identifier: Apache-2.0
 * The simulated GPU's side of the reliability tests: what the simulator says
 * the group's processes hold (its shared state file, read-only), compared with
 * the group's count. */
#ifndef GS_TEST_SIMVIEW_H
#define GS_TEST_SIMVIEW_H

#include <errno.h>

#include "../../simgpu/src/simstate.h"
#include "hooktest.h"

/* The simulator's state, or NULL while no process has created it yet. */
static inline const struct sim_state *sv_try_map(void)
{
	const char *path = getenv("GPUSLICE_SIM_STATE");
	CHECK(path != NULL);
	int fd = open(path, O_RDONLY);
	if (fd < 0 && errno == ENOENT)
		return NULL;
	CHECK(fd >= 0);
	struct stat st;
	CHECK(fstat(fd, &st) == 0);
	if ((size_t)st.st_size < sizeof(struct sim_state)) { /* still being created */
		close(fd);
		return NULL;
	}
	void *m = mmap(NULL, sizeof(struct sim_state), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	CHECK(m != MAP_FAILED);
	return m;
}

static inline const struct sim_state *sv_map(void)
{
	const struct sim_state *s = sv_try_map();
	CHECK(s != NULL);
	return s;
}

/* Bytes the simulator says the group's live members hold on device 0. */
static inline uint64_t sv_group_held(const struct sim_state *s, const struct gs_shm_file *g)
{
	int32_t pids[64];
	int n = 0;
	for (int j = 0; j < GS_SHM_MAX_PROCS && n < 64; j++)
		if (__atomic_load_n(&g->proc[j].state, __ATOMIC_ACQUIRE) == GS_PROC_LIVE)
			pids[n++] = g->proc[j].pid;
	uint64_t sum = 0;
	for (int i = 0; i < SIM_MAX_PROCS; i++) {
		int32_t pid = atomic_load(&s->proc[i].pid);
		for (int j = 0; pid != 0 && j < n; j++)
			if (pids[j] == pid) {
				sum += atomic_load(&s->proc[i].used[0]);
				break;
			}
	}
	return sum;
}

/* Opens the driver in group name under a 1 GiB limit, attaches this process
 * to the group with one allocation, and maps the group's file (*grp) and the
 * simulator's state (*sim). */
static inline void sv_open_group(const char *name, struct drv *d, CUcontext *primary, const struct gs_shm_file **grp,
				 const struct sim_state **sim)
{
	const char *path = ht_group(name, "1073741824");
	drv_open(d, primary);
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 1 * MiB), CUDA_SUCCESS); /* attaches us to the group */
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	*grp = ht_map(path);
	*sim = sv_map();
	CHECK(*grp != NULL);
}

/* Bytes the whole simulated device 0 holds. */
static inline uint64_t sv_device_used(const struct sim_state *s)
{
	return atomic_load(&s->dev[0].used);
}

#endif /* GS_TEST_SIMVIEW_H */
