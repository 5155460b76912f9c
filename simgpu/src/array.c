/* SPDX-License-Identifier: Apache-2.0
 * CUDA arrays: charged against device memory like any allocation. */
#include <stdlib.h>

#include "alloc.h"
#include "cuapi.h"

struct sim_array {
	uint32_t magic;
	int dev;
	size_t bytes;
	CUDA_ARRAY3D_DESCRIPTOR desc;
	struct sim_ctx *ctx;    /* arrays go with their context, like the driver's */
	struct sim_array *next; /* registry */
};

static struct {
	pthread_mutex_t mu;
	struct sim_array *all;
} arrays = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Called with arrays.mu held. */
static bool array_unlink(struct sim_array *a)
{
	for (struct sim_array **p = &arrays.all; *p != NULL; p = &(*p)->next)
		if (*p == a) {
			*p = a->next;
			return true;
		}
	return false;
}

void sim_array_free_ctx(struct sim_ctx *c)
{
	pthread_mutex_lock(&arrays.mu);
	for (struct sim_array **p = &arrays.all; *p != NULL;) {
		struct sim_array *a = *p;
		if (a->ctx != c) {
			p = &a->next;
			continue;
		}
		*p = a->next;
		sim_uncharge(a->dev, a->bytes);
		a->magic = 0;
		free(a);
	}
	pthread_mutex_unlock(&arrays.mu);
}

static size_t format_bytes(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		return 4;
	}
	return 0;
}

static CUresult array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);
	size_t e = d != NULL ? format_bytes(d->Format) : 0, bytes;
	struct sim_array *a;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL || e == 0 || d->Width == 0 || d->Width > 131072 || d->Height > 65536 || d->Depth > 16384 ||
	    (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4))
		return CUDA_ERROR_INVALID_VALUE;
	bytes = d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) * e * d->NumChannels;
	if ((a = calloc(1, sizeof(*a))) == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = sim_charge(c->dev, bytes);
	if (rc != CUDA_SUCCESS) {
		free(a);
		return rc;
	}
	pthread_mutex_lock(&arrays.mu);
	*a = (struct sim_array){
		.magic = SIM_MAGIC_ARRAY, .dev = c->dev, .bytes = bytes, .desc = *d, .ctx = c, .next = arrays.all};
	arrays.all = a;
	pthread_mutex_unlock(&arrays.mu);
	*out = (CUarray)a;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
	CUDA_ARRAY3D_DESCRIPTOR d3 = {0};

	if (d == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	d3.Width = d->Width;
	d3.Height = d->Height;
	d3.Format = d->Format;
	d3.NumChannels = d->NumChannels;
	return array_create(a, &d3);
}

SIM_API CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	return array_create(a, d);
}

static CUresult array_get(CUarray h, struct sim_array **out)
{
	struct sim_array *a = (struct sim_array *)h;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (a == NULL || a->magic != SIM_MAGIC_ARRAY)
		return CUDA_ERROR_INVALID_HANDLE;
	*out = a;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray h)
{
	struct sim_array *a;
	CUresult rc = array_get(h, &a);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (d == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	d->Width = a->desc.Width;
	d->Height = a->desc.Height;
	d->Format = a->desc.Format;
	d->NumChannels = a->desc.NumChannels;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray h)
{
	struct sim_array *a;
	CUresult rc = array_get(h, &a);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (d == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*d = a->desc;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuArrayDestroy(CUarray h)
{
	struct sim_array *a = (struct sim_array *)h;
	CUresult rc = sim_check_init();
	bool found;

	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&arrays.mu);
	found = a != NULL && array_unlink(a);
	if (found) {
		sim_uncharge(a->dev, a->bytes);
		a->magic = 0;
		free(a);
	}
	pthread_mutex_unlock(&arrays.mu);
	return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
