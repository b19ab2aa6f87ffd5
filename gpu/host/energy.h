// energy.h: the GPU board's energy counter, read through NVML loaded at run time.
//
// Why: on a board at its power limit the clock, and so the step time, follow the energy a
// step needs, not the kernels' times at full clock; joules per step is the number that
// says whether a change helps there. NVML is opened with dlopen so that the trainer
// neither links against nor needs it: where the library or the counter is missing (no
// driver, a virtual machine that hides it, an old GPU) the reader reports unavailable and
// the caller leaves energy out of its output.
#ifndef COMMON_ENERGY_H
#define COMMON_ENERGY_H

#include <dlfcn.h>
#include <stdio.h>

typedef struct {
    void *lib;
    void *dev;  // nvmlDevice_t
    int (*get_energy)(void *dev, unsigned long long *millijoules);
    char why[128];  // why the counter is unavailable (empty when it works)
    int nvml_up;    // nvmlInit succeeded: nvmlShutdown is owed
} EnergyMeter;

// Ends the meter's use of NVML (nvmlShutdown balances nvmlInit) and unloads it.
static inline void energy_close(EnergyMeter *m) {
    if (m->lib) {
        int (*shutdown)(void) = (int (*)(void))dlsym(m->lib, "nvmlShutdown");
        if (m->nvml_up && shutdown) shutdown();
        dlclose(m->lib);
    }
    m->nvml_up = 0;
    m->lib = m->dev = NULL;
    m->get_energy = NULL;
}

// energy_open: the counter of the GPU at PCI bus id `pci_bus_id` ("0000:1b:00.0", as
// cudaDeviceGetPCIBusId writes it). Returns 1 when it can be read, else 0 with m->why set.
static inline int energy_open(EnergyMeter *m, const char *pci_bus_id) {
    m->lib = NULL;
    m->dev = NULL;
    m->get_energy = NULL;
    m->why[0] = '\0';
    m->nvml_up = 0;
    m->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!m->lib) {
        snprintf(m->why, sizeof m->why, "libnvidia-ml.so.1 not found");
        return 0;
    }
    int (*init)(void) = (int (*)(void))dlsym(m->lib, "nvmlInit_v2");
    int (*by_bus)(const char *, void **) =
        (int (*)(const char *, void **))dlsym(m->lib, "nvmlDeviceGetHandleByPciBusId_v2");
    m->get_energy = (int (*)(void *, unsigned long long *))dlsym(m->lib, "nvmlDeviceGetTotalEnergyConsumption");
    unsigned long long mj;
    int rc = 0;
    if (init && by_bus && m->get_energy) {
        rc = init();
        m->nvml_up = rc == 0;
    }
    if (!init || !by_bus || !m->get_energy) {
        snprintf(m->why, sizeof m->why, "NVML lacks the energy functions");
    } else if (!m->nvml_up) {
        snprintf(m->why, sizeof m->why, "nvmlInit failed (NVML error %d)", rc);
    } else if ((rc = by_bus(pci_bus_id, &m->dev)) != 0) {
        snprintf(m->why, sizeof m->why, "NVML does not know GPU %s (NVML error %d)", pci_bus_id, rc);
    } else if ((rc = m->get_energy(m->dev, &mj)) != 0) {
        snprintf(m->why, sizeof m->why, "no energy counter on this GPU (NVML error %d)", rc);
    } else {
        return 1;
    }
    int (*shutdown)(void) = (int (*)(void))dlsym(m->lib, "nvmlShutdown");
    if (m->nvml_up && shutdown) shutdown();
    m->nvml_up = 0;
    m->dev = NULL;
    m->get_energy = NULL;
    return 0;
}

// energy_joules: the counter now, in joules since the driver loaded; -1 when unavailable.
// A read that fails makes the meter unavailable for good (with the reason in m->why), so
// that no difference is ever taken across a failed read.
static inline double energy_joules(EnergyMeter *m) {
    unsigned long long mj;
    if (!m->get_energy) return -1.0;
    int rc = m->get_energy(m->dev, &mj);
    if (rc != 0) {
        snprintf(m->why, sizeof m->why, "the energy counter failed during the run (NVML error %d)", rc);
        m->get_energy = NULL;
        return -1.0;
    }
    return 1e-3 * (double)mj;
}

#endif // COMMON_ENERGY_H
