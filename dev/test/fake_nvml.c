// fake_nvml.c: a stand-in for the driver's libnvidia-ml.so.1 with the three functions
// gpu/host/energy.h looks up, so that test_energy can check the reader on a machine without
// a GPU. One GPU, at PCI bus id 0000:1b:00.0; its energy counter starts at 5000 mJ and
// advances 1500 mJ per read. FAKE_NVML_INIT_FAIL and FAKE_NVML_NO_COUNTER (set in the
// environment at call time) make nvmlInit and the counter fail with NVML's error codes;
// FAKE_NVML_FAIL_AFTER=N makes the counter fail after N reads (a GPU lost mid-run).
#include <stdlib.h>
#include <string.h>

static unsigned long long g_counter_mj = 5000;
static int g_reads = 0, g_inits = 0, g_shutdowns = 0;

// for the test: how often nvmlInit and nvmlShutdown were called
int fake_nvml_inits(void) { return g_inits; }
int fake_nvml_shutdowns(void) { return g_shutdowns; }

int nvmlShutdown(void) { g_shutdowns++; return 0; }

int nvmlInit_v2(void) {
    if (getenv("FAKE_NVML_INIT_FAIL")) return 999;  // NVML_ERROR_UNKNOWN
    g_inits++;
    return 0;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev) {
    if (strcmp(bus, "0000:1b:00.0") != 0) return 6;  // NVML_ERROR_NOT_FOUND
    *dev = &g_counter_mj;
    return 0;
}

int nvmlDeviceGetTotalEnergyConsumption(void *dev, unsigned long long *mj) {
    if (getenv("FAKE_NVML_NO_COUNTER")) return 3;  // NVML_ERROR_NOT_SUPPORTED
    if (dev != &g_counter_mj) return 2;           // NVML_ERROR_INVALID_ARGUMENT
    const char *after = getenv("FAKE_NVML_FAIL_AFTER");
    if (after && ++g_reads > atoi(after)) return 15;  // NVML_ERROR_GPU_IS_LOST
    g_counter_mj += 1500;
    *mj = g_counter_mj;
    return 0;
}
