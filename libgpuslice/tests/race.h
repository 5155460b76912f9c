/* SPDX-License-Identifier: Apache-2.0
 * Races of group members for the hook tests of memory no call names
 * (hooks_drvmem_test.c, hooks_ctxseed_test.c): members started together, their
 * calls begun at one instant, the simulated device watched without pause.
 */
#ifndef GS_TEST_RACE_H
#define GS_TEST_RACE_H

#include <fcntl.h>
#include <unistd.h>

#include "../src/internal.h"
#include "hooktest.h"
#include "simview.h"

/* A race of members: each says 'R' on out when ready, starts its call when
 * go reads EOF (all at once), says its outcome on out ('M' made, 'N' refused
 * before the driver was asked, 'X' anything else) and holds what it made
 * until hold reads EOF, so that no member's exit makes room for another. */
struct race {
	int out, go, hold; /* the members' ends */
	int go_w, hold_w;  /* the parent's, closed in the members */
};

static inline void race_ready(const struct race *r)
{
	char b;
	close(r->go_w);
	close(r->hold_w);
	CHECK(write(r->out, "R", 1) == 1 && read(r->go, &b, 1) == 0);
}

static inline int race_done(const struct race *r, char outcome)
{
	char b;
	CHECK(write(r->out, &outcome, 1) == 1);
	while (read(r->hold, &b, 1) > 0)
		;
	return 0;
}

/* Runs n members of fn at once, watching the device without pause until
 * each said its outcome: how many made and refused; the most it held. */
static inline uint64_t race_run(int n, int (*fn)(void *), int *made, int *refused)
{
	int out[2], go[2], hold[2];
	CHECK(n <= 8 && pipe(out) == 0 && pipe(go) == 0 && pipe(hold) == 0);
	struct race r = {out[1], go[0], hold[0], go[1], hold[1]};
	pid_t kids[8];
	char c;
	for (int i = 0; i < n; i++)
		kids[i] = ht_spawn(fn, &r);
	for (int i = 0; i < n; i++)
		CHECK(read(out[0], &c, 1) == 1 && c == 'R');
	const struct sim_state *dev = sv_map();
	CHECK(fcntl(out[0], F_SETFL, O_NONBLOCK) == 0);
	close(go[1]);
	uint64_t most = 0;
	*made = *refused = 0;
	for (int got = 0; got < n;) {
		uint64_t held = atomic_load(&dev->dev[0].used);
		most = held > most ? held : most;
		if (read(out[0], &c, 1) == 1) {
			got++;
			*made += c == 'M';
			*refused += c == 'N';
		}
	}
	close(hold[1]);
	for (int i = 0; i < n; i++)
		CHECK_EQ(ht_wait(kids[i]), 0);
	close(out[0]);
	close(out[1]);
	close(go[0]);
	close(hold[0]);
	return most;
}

/* A fresh member's first context (cuCtxCreate_v2, as long as
 * GPUSLICE_SIM_LATENCY_US says in the driver), in the group its parent named:
 * 'M' made, 'N' refused (CUDA_ERROR_OUT_OF_MEMORY), 'X' anything else.
 * Whether the driver was asked is not read from the time the call took (load
 * changes it): the callers check that the device never held the context past
 * the limit (race_run's watch) or at all (sv_device_used). */
static inline int first_create(void *arg)
{
	const struct race *r = arg;
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
	CHECK(cuda != NULL);
	CUresult (*init)(unsigned) = NULL;
	*(void **)&init = drv_sym(cuda, "cuInit");
	CHECK_EQ(init(0), CUDA_SUCCESS);
	race_ready(r);
	CUcontext c;
	CUresult rc = cuCtxCreate_v2(&c, 0, 0);
	return race_done(r, rc == CUDA_SUCCESS ? 'M' : rc == CUDA_ERROR_OUT_OF_MEMORY ? 'N' : 'X');
}

#endif /* GS_TEST_RACE_H */
