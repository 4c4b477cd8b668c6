/* nvml.c — zl_backend_clock_read (backend.h) on CUDA: the SM clock, board power, its limit,
 * temperature and clock-event reasons of this rank's GPU, read through NVML; and whether it has
 * an active NVLink (zl_nvml_nvlink_active, for backend_cuda.c's choice of all-gather engine).
 *
 * NVML is the driver's library (libnvidia-ml.so.1); its header is not in every CUDA toolkit,
 * and a machine without the driver has no GPU to read. So the library is opened at run time
 * and the ten calls used here are declared below, from NVML's documented, stable C API. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <time.h> /* clock_gettime: when each reading was taken */

#include "backend.h"

typedef int nvml_return;                    /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef struct nvml_device_s *nvml_device;  /* nvmlDevice_t */
enum { NVML_CLOCK_SM = 1, NVML_TEMPERATURE_GPU = 0 };

static struct {
    int tried, ok;
    char why[160];
    nvml_device dev;
    nvml_return (*clock)(nvml_device, int, unsigned *);       /* nvmlDeviceGetClockInfo, MHz */
    nvml_return (*power)(nvml_device, unsigned *);            /* nvmlDeviceGetPowerUsage, mW */
    nvml_return (*limit)(nvml_device, unsigned *);            /* nvmlDeviceGetEnforcedPowerLimit, mW */
    nvml_return (*temp)(nvml_device, int, unsigned *);        /* nvmlDeviceGetTemperature, °C */
    nvml_return (*reasons)(nvml_device, unsigned long long *); /* ...ClocksEventReasons (ThrottleReasons before) */
    nvml_return (*energy)(nvml_device, unsigned long long *);  /* nvmlDeviceGetTotalEnergyConsumption, mJ; optional */
    nvml_return (*nvlink)(nvml_device, unsigned, int *);      /* nvmlDeviceGetNvLinkState: 1 active; optional */
    const char *(*error)(nvml_return);                        /* nvmlErrorString */
} g;

static const char *error_text(nvml_return rc) { return g.error ? g.error(rc) : "unknown NVML error"; }

/* Open NVML and find this rank's GPU by the PCI bus id CUDA gave it; g.why says what failed. */
static void open_nvml(void) {
    g.tried = 1;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(g.why, sizeof g.why, "NVML not loaded (%s)", dlerror());
        return;
    }
    nvml_return (*init)(void), (*by_bus)(const char *, nvml_device *);
    *(void **)&init = dlsym(lib, "nvmlInit_v2"); /* POSIX's way to take a function from dlsym */
    *(void **)&by_bus = dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&g.error = dlsym(lib, "nvmlErrorString");
    *(void **)&g.clock = dlsym(lib, "nvmlDeviceGetClockInfo");
    *(void **)&g.power = dlsym(lib, "nvmlDeviceGetPowerUsage");
    *(void **)&g.limit = dlsym(lib, "nvmlDeviceGetEnforcedPowerLimit");
    *(void **)&g.temp = dlsym(lib, "nvmlDeviceGetTemperature");
    *(void **)&g.reasons = dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!g.reasons) *(void **)&g.reasons = dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    *(void **)&g.energy = dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption"); /* Volta and later */
    *(void **)&g.nvlink = dlsym(lib, "nvmlDeviceGetNvLinkState");
    if (!init || !by_bus || !g.clock || !g.power || !g.limit || !g.temp || !g.reasons) {
        snprintf(g.why, sizeof g.why, "NVML lacks a call this reader uses (driver too old?)");
        return;
    }
    const char *id = zl_backend_device_pci_bus_id(); /* the current device's where no backend chose one */
    nvml_return rc = init();
    if (rc == 0) rc = by_bus(id, &g.dev);
    if (rc != 0) {
        snprintf(g.why, sizeof g.why, "NVML: %s (device %s)", error_text(rc), id);
        return;
    }
    g.ok = 1;
}

int zl_backend_clock_read(zl_clock_reading *r, char *why, size_t n) {
    if (!g.tried) open_nvml();
    if (!g.ok) {
        snprintf(why, n, "%s", g.why);
        return -1;
    }
    unsigned mhz = 0, mw = 0, limit_mw = 0, temp = 0;
    unsigned long long reasons = 0;
    nvml_return rc = g.clock(g.dev, NVML_CLOCK_SM, &mhz);
    if (rc == 0) rc = g.power(g.dev, &mw);
    if (rc == 0) rc = g.limit(g.dev, &limit_mw);
    if (rc == 0) rc = g.temp(g.dev, NVML_TEMPERATURE_GPU, &temp);
    if (rc == 0) rc = g.reasons(g.dev, &reasons);
    if (rc != 0) {
        snprintf(why, n, "NVML: %s", error_text(rc));
        return -1;
    }
    /* the energy counter is optional: a GPU without one still has clocks to read */
    unsigned long long mj = 0;
    double energy_j = g.energy && g.energy(g.dev, &mj) == 0 ? mj / 1e3 : -1.0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    *r = (zl_clock_reading){.sm_mhz = mhz, .power_w = mw / 1e3, .power_limit_w = limit_mw / 1e3, .temp_c = temp,
                            .reasons = reasons, .energy_j = energy_j, .t_s = now.tv_sec + now.tv_nsec / 1e9};
    return 0;
}

/* 1 if this rank's GPU has at least one active NVLink, else 0 — also where NVML cannot say. NCCL
 * gives symmetric memory, and with it copy-engine collectives, only to GPUs that NVLink joins. */
int zl_nvml_nvlink_active(void) {
    enum { NVML_NVLINK_MAX_LINKS = 18 }; /* nvml.h's, H100 and H200: 18 links */
    if (!g.tried) open_nvml();
    if (!g.ok || !g.nvlink) return 0;
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
        int active = 0;
        if (g.nvlink(g.dev, link, &active) == 0 && active == 1) return 1;
    }
    return 0;
}
