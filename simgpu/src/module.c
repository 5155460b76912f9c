/* SPDX-License-Identifier: Apache-2.0
 * Modules and libraries: any image is accepted and any function name
 * resolves; "gpuslice_sim_busy" is the kernel that takes time. CUkernel and
 * CUfunction are the same object here. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuapi.h"
#include "alloc.h"
#include "sim.h"

#define BUSY_KERNEL "gpuslice_sim_busy"

/* Every loaded module (the real driver owns them until unload or exit). */
static struct {
	pthread_mutex_t mu;
	struct sim_module *head;
} mods = {.mu = PTHREAD_MUTEX_INITIALIZER};

static CUresult module_new(CUmodule *out, const void *image, bool need_ctx, bool is_path)
{
	struct sim_ctx *c;
	struct sim_module *m;
	CUresult rc = need_ctx ? sim_ctx_get(&c) : sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL || image == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	m = calloc(1, sizeof(*m));
	if (m == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* A library is loaded into the current context, if any, as lazily as we model it. */
	struct sim_ctx *at = need_ctx ? c : sim_current_ctx();
	uint64_t globals = at != NULL && at->active && !is_path ? sim_ptx_globals(image) : 0;
	if (globals > 0 && sim_charge(at->dev, globals) != CUDA_SUCCESS) {
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY; /* its globals do not fit */
	}
	m->dev = globals > 0 ? at->dev : -1;
	m->charged = globals;
	m->ctx = need_ctx ? c : NULL;
	m->magic = SIM_MAGIC_MODULE;
	pthread_mutex_init(&m->mu, NULL);
	pthread_mutex_lock(&mods.mu);
	m->next = mods.head;
	mods.head = m;
	pthread_mutex_unlock(&mods.mu);
	*out = (CUmodule)m;
	return CUDA_SUCCESS;
}

SIM_HIDDEN void sim_modules_ctx_gone(struct sim_ctx *c)
{
	pthread_mutex_lock(&mods.mu);
	for (struct sim_module *m = mods.head; m != NULL; m = m->next) {
		if (m->ctx != c)
			continue;
		if (m->charged > 0)
			sim_uncharge(m->dev, m->charged);
		m->charged = 0;
		m->ctx = NULL;
	}
	pthread_mutex_unlock(&mods.mu);
}

static CUresult module_get(CUmodule h, struct sim_module **out)
{
	struct sim_module *m = (struct sim_module *)h;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (m == NULL || m->magic != SIM_MAGIC_MODULE)
		return CUDA_ERROR_INVALID_HANDLE;
	*out = m;
	return CUDA_SUCCESS;
}

static CUresult module_free(CUmodule h)
{
	struct sim_module *m;
	CUresult rc = module_get(h, &m);

	if (rc != CUDA_SUCCESS)
		return rc;
	m->magic = 0;
	pthread_mutex_lock(&mods.mu);
	if (m->charged > 0)
		sim_uncharge(m->dev, m->charged);
	m->charged = 0;
	for (struct sim_module **pp = &mods.head; *pp != NULL; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	pthread_mutex_unlock(&mods.mu);
	for (struct sim_func *f = m->funcs, *n; f != NULL; f = n) {
		n = f->next;
		f->magic = 0;
		free(f);
	}
	pthread_mutex_destroy(&m->mu);
	free(m);
	return CUDA_SUCCESS;
}

static CUresult module_func(struct sim_module *m, const char *name, struct sim_func **out)
{
	struct sim_func *f;

	if (name == NULL || *name == '\0' || strlen(name) >= sizeof(f->name))
		return name == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_FOUND;
	pthread_mutex_lock(&m->mu);
	for (f = m->funcs; f != NULL && strcmp(f->name, name) != 0; f = f->next)
		;
	if (f == NULL && (f = calloc(1, sizeof(*f))) != NULL) {
		f->magic = SIM_MAGIC_FUNC;
		f->owner = m;
		f->busy = strcmp(name, BUSY_KERNEL) == 0;
		f->max_dyn_smem = 49152;
		snprintf(f->name, sizeof(f->name), "%s", name);
		f->next = m->funcs;
		m->funcs = f;
	}
	pthread_mutex_unlock(&m->mu);
	if (f == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = f;
	return CUDA_SUCCESS;
}

static CUresult readable_file(const char *path)
{
	int fd, saved = errno;

	if (path == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		close(fd);
	errno = saved;
	return fd < 0 ? CUDA_ERROR_FILE_NOT_FOUND : CUDA_SUCCESS;
}

SIM_API CUresult cuModuleLoad(CUmodule *m, const char *path)
{
	CUresult rc = sim_check_init();

	if (rc == CUDA_SUCCESS)
		rc = readable_file(path);
	return rc == CUDA_SUCCESS ? module_new(m, path, true, true) : rc;
}

SIM_API CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	return module_new(m, image, true, false);
}

SIM_API CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *o, void **v)
{
	if (n > 0 && (o == NULL || v == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	return module_new(m, image, true, false);
}

SIM_API CUresult cuModuleLoadFatBinary(CUmodule *m, const void *fatbin)
{
	return module_new(m, fatbin, true, false);
}

SIM_API CUresult cuModuleUnload(CUmodule m)
{
	return module_free(m);
}

static CUresult get_function(CUfunction *out, CUmodule h, const char *name)
{
	struct sim_module *m;
	CUresult rc = module_get(h, &m);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return module_func(m, name, (struct sim_func **)out);
}

static CUresult get_global(CUdeviceptr *p, size_t *n, CUmodule h, const char *name)
{
	struct sim_module *m;
	CUresult rc = module_get(h, &m);

	(void)p;
	(void)n;
	if (rc != CUDA_SUCCESS)
		return rc;
	return name == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_FOUND; /* images are not parsed */
}

SIM_API CUresult cuModuleGetFunction(CUfunction *out, CUmodule h, const char *name)
{
	return get_function(out, h, name);
}

SIM_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *n, CUmodule h, const char *name)
{
	return get_global(p, n, h, name);
}

SIM_API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (mode == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*mode = CU_MODULE_LAZY_LOADING;
	return CUDA_SUCCESS;
}

static CUresult lib_load(CUlibrary *l, const void *code, bool is_path, CUjit_option *jo, void **jv, unsigned int jn,
			 CUlibraryOption *lo, void **lv, unsigned int ln)
{
	if ((jn > 0 && (jo == NULL || jv == NULL)) || (ln > 0 && (lo == NULL || lv == NULL)))
		return CUDA_ERROR_INVALID_VALUE;
	return module_new((CUmodule *)l, code, false, is_path);
}

SIM_API CUresult cuLibraryLoadData(CUlibrary *l, const void *code, CUjit_option *jo, void **jv, unsigned int jn,
				   CUlibraryOption *lo, void **lv, unsigned int ln)
{
	return lib_load(l, code, false, jo, jv, jn, lo, lv, ln);
}

SIM_API CUresult cuLibraryLoadFromFile(CUlibrary *l, const char *path, CUjit_option *jo, void **jv, unsigned int jn,
				       CUlibraryOption *lo, void **lv, unsigned int ln)
{
	CUresult rc = sim_check_init();

	if (rc == CUDA_SUCCESS)
		rc = readable_file(path);
	return rc == CUDA_SUCCESS ? lib_load(l, path, true, jo, jv, jn, lo, lv, ln) : rc;
}

SIM_API CUresult cuLibraryUnload(CUlibrary l)
{
	return module_free((CUmodule)l);
}

SIM_API CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary l, const char *name)
{
	return get_function((CUfunction *)k, (CUmodule)l, name);
}

SIM_API CUresult cuLibraryGetModule(CUmodule *m, CUlibrary l)
{
	struct sim_module *mod;
	CUresult rc = module_get((CUmodule)l, &mod);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (m == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*m = (CUmodule)mod;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuLibraryGetGlobal(CUdeviceptr *p, size_t *n, CUlibrary l, const char *name)
{
	return get_global(p, n, (CUmodule)l, name);
}
