/*
 * A stand-in for the NVIDIA driver's libnvidia-ml.so.1 on a machine without
 * a GPU: one fake Hopper GPU, spoken through NVML's C ABI (types as in
 * nvml.h). testbin.FakeNVML links it with weak definitions of every other
 * nvml* symbol the binary uses (each answers NVML_ERROR_NOT_SUPPORTED); tests
 * load it through LD_LIBRARY_PATH and check that bridge finds it with dlopen
 * and reaches these functions through its lazily bound calls.
 *
 * GPM follows nvml.h's sequence: samples allocated, filled, two turned into
 * metrics, freed. Misuse (a freed or unfilled sample, Sample1 not older
 * than Sample2) fails the call and is counted; with FAKE_NVML_REPORT set,
 * nvmlShutdown writes the counts to that file.
 *
 * FAKE_NVML_PROFILE sets the GPU's activity and clock events, for the
 * bottleneck verdict's tests: "busy" (SM activity 90%, held at its power
 * cap: the SW power cap event, normal for a busy GPU), "idle" (SM activity
 * 2%, the GPU idle event), "hot" (SM activity 90%, hardware and software
 * thermal slowdown). Unset: the levels below, and no clock events
 * (NOT_SUPPORTED).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
enum { SUCCESS = 0, ERROR_INVALID_ARGUMENT = 2, ERROR_NOT_SUPPORTED = 3, ERROR_INSUFFICIENT_SIZE = 7,
       ERROR_ARGUMENT_VERSION_MISMATCH = 25 };
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;

/* What the test expects to read back. */
#define TOTAL 80000000000ULL
#define USED 12345000000ULL
#define RESERVED 500000000ULL

static int gpu0; /* its address is the device handle */

static const char *profile(void) {
	const char *p = getenv("FAKE_NVML_PROFILE");
	return p ? p : "";
}
static int is(const char *p) { return strcmp(profile(), p) == 0; }

static nvmlReturn_t str(char *buf, unsigned int len, const char *s) {
	if (strlen(s) + 1 > len) return ERROR_INSUFFICIENT_SIZE;
	strcpy(buf, s);
	return SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return SUCCESS; }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return SUCCESS; }
static int allocs, frees, misuse, samples, computed;

nvmlReturn_t nvmlShutdown(void) {
	const char *path = getenv("FAKE_NVML_REPORT");
	FILE *f = path ? fopen(path, "w") : NULL;
	if (f) {
		fprintf(f, "allocs=%d frees=%d misuse=%d samples=%d computed=%d\n", allocs, frees, misuse, samples, computed);
		fclose(f);
	}
	return SUCCESS;
}
const char *nvmlErrorString(nvmlReturn_t r) { return r == SUCCESS ? "Success" : "Not Supported (fake NVML)"; }
nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n) { return str(v, n, "999.99-fake"); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int n) { return str(v, n, "99.999.99-fake"); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { *v = 12040; return SUCCESS; }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12040; return SUCCESS; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { *n = 1; return SUCCESS; }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) {
	if (i != 0) return ERROR_INVALID_ARGUMENT;
	*h = &gpu0;
	return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUUID(void *h, char *u, unsigned int n) { (void)h; return str(u, n, "GPU-fa4e0000-0000-4000-8000-000000000000"); }
nvmlReturn_t nvmlDeviceGetName(void *h, char *s, unsigned int n) { (void)h; return str(s, n, "Fake NVML GPU"); }
nvmlReturn_t nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) {
	(void)h;
	m->total = TOTAL; m->used = USED; m->free = TOTAL - USED;
	return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *h, nvmlMemory_v2_t *m) {
	(void)h;
	m->total = TOTAL; m->reserved = RESERVED; m->used = USED; m->free = TOTAL - USED - RESERVED;
	return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(void *h, nvmlUtilization_t *u) {
	(void)h;
	u->gpu = is("idle") ? 1 : (is("busy") || is("hot")) ? 95 : 42;
	u->memory = 17;
	return SUCCESS;
}

/* Clock event reasons (nvml.h's nvmlClocksEventReason* bits). */
static nvmlReturn_t reasons(unsigned long long *r) {
	if (is("busy")) *r = 0x4;              /* SwPowerCap */
	else if (is("idle")) *r = 0x1;         /* GpuIdle */
	else if (is("hot")) *r = 0x40 | 0x20;  /* HwThermalSlowdown, SwThermalSlowdown */
	else return ERROR_NOT_SUPPORTED;
	return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *r) { (void)h; return reasons(r); }
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(void *h, unsigned long long *r) { (void)h; return reasons(r); }
nvmlReturn_t nvmlDeviceGetPowerUsage(void *h, unsigned int *mw) { (void)h; *mw = 123456; return SUCCESS; } /* POWER_MW */

/*
 * Energy: from 5 MJ, growing at the power nvmlDeviceGetPowerUsage says
 * (123.456 W = 123.456 mJ a millisecond) over the monotonic clock, as a
 * real board's counter does: bridge drops a growth no GPU can make.
 */
#define POWER_MW 123456ULL
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *mj) {
	(void)h;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	unsigned long long ms = (unsigned long long)ts.tv_sec * 1000ULL + (unsigned long long)ts.tv_nsec / 1000000ULL;
	*mj = 5000000000ULL + ms * POWER_MW / 1000ULL;
	return SUCCESS;
}

/* GPM. */
typedef struct { unsigned int version, isSupportedDevice; } nvmlGpmSupport_t;
struct sample { int freed, seq; };
typedef struct { struct sample *handle; } nvmlGpmSample_t;
typedef struct { char *shortName, *longName, *unit; } nvmlGpmMetricInfo_t;
typedef struct {
	unsigned int metricId;
	nvmlReturn_t nvmlReturn;
	double value;
	nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;
typedef struct {
	unsigned int version, numMetrics;
	nvmlGpmSample_t sample1, sample2;
	nvmlGpmMetric_t metrics[];
} nvmlGpmMetricsGet_t;

nvmlReturn_t nvmlGpmQueryDeviceSupport(void *h, nvmlGpmSupport_t *s) {
	(void)h;
	if (s->version != 1) return ERROR_ARGUMENT_VERSION_MISMATCH;
	s->isSupportedDevice = 1;
	return SUCCESS;
}
nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *s) {
	/* Never released, only marked: a use after free stays detectable. */
	s->handle = calloc(1, sizeof(struct sample));
	if (!s->handle) return ERROR_INVALID_ARGUMENT;
	allocs++;
	return SUCCESS;
}
nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t s) {
	if (!s.handle || s.handle->freed) { misuse++; return ERROR_INVALID_ARGUMENT; }
	s.handle->freed = 1;
	frees++;
	return SUCCESS;
}
nvmlReturn_t nvmlGpmSampleGet(void *h, nvmlGpmSample_t s) {
	(void)h;
	if (!s.handle || s.handle->freed) { misuse++; return ERROR_INVALID_ARGUMENT; }
	s.handle->seq = ++samples;
	return SUCCESS;
}

/* The fake GPU's activity, in NVML's units (% and MiB/s). NVLink is not
 * counted: a PCIe board. */
static nvmlReturn_t level(unsigned int id, double *v) {
	switch (id) {
	case 1: *v = is("idle") ? 2 : 90; break;                                  /* GRAPHICS_UTIL */
	case 2: *v = is("idle") ? 2 : (is("busy") || is("hot")) ? 90 : 37.5; break; /* SM_UTIL */
	case 3: *v = 20; break;     /* SM_OCCUPANCY */
	case 4: *v = 7.5; break;    /* INTEGER_UTIL */
	case 5: *v = 25; break;     /* ANY_TENSOR_UTIL */
	case 6: case 8: case 9: *v = 0; break; /* DFMA, DMMA, IMMA tensor */
	case 7: *v = 25; break;     /* HMMA_TENSOR_UTIL */
	case 10: *v = 62.5; break;  /* DRAM_BW_UTIL */
	case 11: *v = 0; break;     /* FP64_UTIL */
	case 12: *v = 12.5; break;  /* FP32_UTIL */
	case 13: *v = 5; break;     /* FP16_UTIL */
	case 20: *v = 1000; break;  /* PCIE_TX_PER_SEC */
	case 21: *v = 2000; break;  /* PCIE_RX_PER_SEC */
	default: return ERROR_NOT_SUPPORTED;
	}
	return SUCCESS;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
	struct sample *a = m->sample1.handle, *b = m->sample2.handle;
	if (m->version != 1) return ERROR_ARGUMENT_VERSION_MISMATCH;
	if (!a || !b || a->freed || b->freed || a->seq == 0 || a->seq >= b->seq || m->numMetrics == 0) {
		misuse++;
		return ERROR_INVALID_ARGUMENT;
	}
	for (unsigned int i = 0; i < m->numMetrics; i++) {
		m->metrics[i].value = 0;
		m->metrics[i].nvmlReturn = level(m->metrics[i].metricId, &m->metrics[i].value);
	}
	computed++;
	return SUCCESS;
}
