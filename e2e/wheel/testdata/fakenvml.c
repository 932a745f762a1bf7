/*
 * A stand-in for the NVIDIA driver's libnvidia-ml.so.1 on a machine without
 * a GPU: one fake GPU, spoken through NVML's C ABI (types as in nvml.h).
 * The wheel test links it with weak definitions of every other nvml* symbol
 * the binary uses (each answers NVML_ERROR_NOT_SUPPORTED), loads it through
 * LD_LIBRARY_PATH, and checks that the wheel's bridge finds it with dlopen and
 * reaches these functions through its lazily bound calls.
 */
#include <string.h>

typedef int nvmlReturn_t;
enum { SUCCESS = 0, ERROR_INVALID_ARGUMENT = 2, ERROR_NOT_SUPPORTED = 3, ERROR_INSUFFICIENT_SIZE = 7 };
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;

/* What the test expects to read back. */
#define TOTAL 80000000000ULL
#define USED 12345000000ULL
#define RESERVED 500000000ULL

static int gpu0; /* its address is the device handle */

static nvmlReturn_t str(char *buf, unsigned int len, const char *s) {
	if (strlen(s) + 1 > len) return ERROR_INSUFFICIENT_SIZE;
	strcpy(buf, s);
	return SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return SUCCESS; }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return SUCCESS; }
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
nvmlReturn_t nvmlDeviceGetUtilizationRates(void *h, nvmlUtilization_t *u) { (void)h; u->gpu = 42; u->memory = 17; return SUCCESS; }
nvmlReturn_t nvmlDeviceGetPowerUsage(void *h, unsigned int *mw) { (void)h; *mw = 123456; return SUCCESS; }
