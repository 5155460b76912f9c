/* SPDX-License-Identifier: Apache-2.0
 * Simulated NVML: init/shutdown, system queries, error strings. NVML sees
 * every simulator device the process may access (it ignores
 * CUDA_VISIBLE_DEVICES, like the real NVML), in the same order as CUDA. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "nvml.h"

#define SIM_NVML_DRIVER_VERSION "550.00-gpuslice-sim"
#define SIM_NVML_VERSION "12.550.00-gpuslice-sim"

struct sim_nvml sim_nvml = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Under sim_nvml.mu: appends the accessible devices not listed yet, in device
 * order. Listed devices keep their index and handle even if their node went
 * away (the real NVML keeps the device files it opened until nvmlShutdown). */
static int rescan_locked(void)
{
	int n = atomic_load_explicit(&sim_nvml.ndev, memory_order_relaxed);

	for (int i = 0; i < (int)sim_nvml.st->ndev && i < SIM_MAX_DEVICES; i++) {
		bool have = false;
		for (int k = 0; k < n && !have; k++)
			have = sim_nvml.dev[k].index == i;
		if (!have && sim_device_accessible(sim_nvml.st, &sim_nvml.access, i))
			sim_nvml.dev[n++] = (struct sim_nvml_dev){SIM_NVML_DEV_MAGIC, i, 0, 0};
	}
	atomic_store_explicit(&sim_nvml.ndev, n, memory_order_release);
	return n;
}

int sim_nvml_rescan(void)
{
	int n;

	if (!sim_nvml.access.devnodes) /* nothing can change */
		return atomic_load(&sim_nvml.ndev);
	pthread_mutex_lock(&sim_nvml.mu);
	n = rescan_locked();
	pthread_mutex_unlock(&sim_nvml.mu);
	return n;
}

static nvmlReturn_t open_state(void)
{
	struct sim_config *cfg = calloc(1, sizeof(*cfg));
	char err[SIM_ERR_LEN + 64];
	nvmlReturn_t rc = NVML_ERROR_DRIVER_NOT_LOADED;

	if (cfg == NULL)
		return NVML_ERROR_MEMORY;
	if (sim_config_from_env(cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "gpuslice: simulated GPU: bad configuration: %s\n", err);
	} else if ((sim_nvml.st = sim_state_open(cfg, err, sizeof(err))) == NULL) {
		fprintf(stderr, "gpuslice: simulated GPU: %s\n", err);
	} else {
		sim_nvml.access = cfg->access;
		rc = NVML_SUCCESS;
	}
	free(cfg);
	return rc;
}

static nvmlReturn_t init(unsigned flags)
{
	nvmlReturn_t rc = NVML_SUCCESS;

	if (flags & ~3u) /* NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH */
		return NVML_ERROR_INVALID_ARGUMENT;
	pthread_mutex_lock(&sim_nvml.mu);
	if (sim_nvml.st == NULL)
		rc = open_state();
	if (rc == NVML_SUCCESS && sim_nvml.refs++ == 0) {
		/* First init, or first after a full shutdown: enumerate afresh. */
		atomic_store(&sim_nvml.ndev, 0);
		rescan_locked();
	}
	pthread_mutex_unlock(&sim_nvml.mu);
	return rc;
}

NVML_API nvmlReturn_t nvmlInit(void)
{
	return init(0);
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
	return init(0);
}

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	return init(flags);
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
	nvmlReturn_t rc = NVML_SUCCESS;

	pthread_mutex_lock(&sim_nvml.mu);
	if (sim_nvml.refs == 0)
		rc = NVML_ERROR_UNINITIALIZED;
	else
		sim_nvml.refs--; /* the mapping stays: handles remain cheap to revalidate */
	pthread_mutex_unlock(&sim_nvml.mu);
	return rc;
}

nvmlReturn_t sim_nvml_check(void)
{
	int refs;

	pthread_mutex_lock(&sim_nvml.mu);
	refs = sim_nvml.refs;
	pthread_mutex_unlock(&sim_nvml.mu);
	return refs > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

NVML_API const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_UNINITIALIZED:
		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:
		return "Not Supported";
	case NVML_ERROR_NO_PERMISSION:
		return "Insufficient Permissions";
	case NVML_ERROR_NOT_FOUND:
		return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED:
		return "Driver Not Loaded";
	case NVML_ERROR_MEMORY:
		return "Insufficient Memory";
	case NVML_ERROR_TIMEOUT:
		return "Timeout";
	case NVML_ERROR_GPU_IS_LOST:
		return "GPU is lost";
	case NVML_ERROR_NO_DATA:
		return "No data";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
		return "Argument version mismatch";
	default:
		return "Unknown Error";
	}
}

static nvmlReturn_t put_string(char *buf, unsigned len, const char *s)
{
	nvmlReturn_t rc = sim_nvml_check();

	if (rc != NVML_SUCCESS)
		return rc;
	if (buf == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (len < strlen(s) + 1)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len)
{
	return put_string(v, len, SIM_NVML_DRIVER_VERSION);
}

NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len)
{
	return put_string(v, len, SIM_NVML_VERSION);
}

static nvmlReturn_t cuda_version(int *v)
{
	if (v == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*v = 12060; /* the CUDA driver API version (sim.h SIM_DRIVER_VERSION) */
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
	return cuda_version(v);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
	return cuda_version(v);
}

NVML_API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int len)
{
	char path[256], buf[256];
	nvmlReturn_t rc = sim_nvml_check();
	ssize_t n;
	int fd;

	if (rc != NVML_SUCCESS)
		return rc;
	if (name == NULL || len == 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	snprintf(path, sizeof(path), "%s/%u/comm", sim_proc_dir(), pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return NVML_ERROR_NOT_FOUND;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return NVML_ERROR_NOT_FOUND;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	snprintf(name, len, "%s", buf);
	return NVML_SUCCESS;
}
