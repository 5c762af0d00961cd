/*
 * fake_nvml.c: a stand-in libnvidia-ml.so.1 for tests on hosts without a GPU.
 *
 * It implements exactly the NVML entry points that nvidia-ml-py 13.615.71
 * calls for gpudock's discovery and process queries, with NVML's signatures,
 * struct layouts and return codes. Nothing else is exported, so any new
 * pynvml call in gpudock fails loudly with NVMLError_FunctionNotFound.
 *
 * State comes from the file named by GPUDOCK_FAKE_NVML_STATE and is re-read
 * on every nvmlInit*. The Python side (tests/kit/fake_nvml/__init__.py)
 * validates a JSON-able dict and writes it in this line format:
 *
 *   init_error <code>                     0 = nvmlInit succeeds
 *   driver <version>
 *   cuda <int>                            e.g. 12040 for CUDA 12.4
 *   gpu <fail> <mig_cur> <mig_pend> <total> <used> <uuid> <name...>
 *   proc <pid> <used_bytes>               belongs to the preceding gpu
 *   pci <bus_id>                          the preceding gpu's PCI bus id
 *   numa <node>                           its host NUMA node; -1 = not supported
 *   link <active> <remote_bus_id>         its next NVLink (0, 1, ...); active 0 or 1
 *   telemetry <util_pct> <temp_c> <mw>    its utilisation, temperature and power draw;
 *                                         without it those queries are NOT_SUPPORTED
 *
 * fail: 0 healthy; 1 handle and UUID work, other device queries return
 * GPU_IS_LOST; 2 even the handle lookup returns GPU_IS_LOST.
 * mig_cur/mig_pend: 0 or 1, or -1 when MIG is not supported.
 * Topology: without a pci line nvmlDeviceGetPciInfo_v3 is NOT_SUPPORTED; a gpu
 * with no link lines answers NOT_SUPPORTED for every link (a PCIe-only GPU),
 * one with N links answers INVALID_ARGUMENT for link >= N; memory affinity
 * (scope NODE or SOCKET) is the one-bit mask of its NUMA node.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
enum {
    OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3,
    NOT_FOUND = 6, INSUFFICIENT_SIZE = 7, DRIVER_NOT_LOADED = 9,
    GPU_IS_LOST = 15, ARGUMENT_VERSION_MISMATCH = 25, UNKNOWN = 999
};

#define MAX_GPUS 16
#define MAX_PROCS 32
#define MAX_LINKS 36 /* NVML_NVLINK_MAX_LINKS */
#define NVML_MEMORY_V2 0x02000028u

typedef struct { unsigned int pid; unsigned long long used; } proc_t;
typedef struct { int active; char remote[32]; } link_t;
typedef struct {
    int fail, mig_current, mig_pending;
    unsigned long long total, used;
    char uuid[96], name[96];
    int nprocs;
    proc_t procs[MAX_PROCS];
    char pci[32];
    int numa;
    int nlinks;
    link_t links[MAX_LINKS];
    int has_telemetry;
    unsigned int util, temp, power_mw;
} gpu_t;
typedef gpu_t *nvmlDevice_t;

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct { /* nvmlPciInfo_t as of NVML 9.0 (pynvml's nvmlPciInfo_t) */
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

static int refcount;
static int ngpus;
static gpu_t gpus[MAX_GPUS];
static char driver_version[80];
static int cuda_version;

static void chomp(char *s) { s[strcspn(s, "\r\n")] = '\0'; }

static void copy_field(char *dst, size_t cap, const char *src) { /* truncates */
    size_t n = strlen(src) < cap ? strlen(src) : cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Loads the state file; returns 0, the configured init_error, or UNKNOWN. */
static nvmlReturn_t load_state(void) {
    const char *path = getenv("GPUDOCK_FAKE_NVML_STATE");
    FILE *f = path ? fopen(path, "r") : NULL;
    char line[512];
    int init_error = 0, n;
    if (!f) {
        fprintf(stderr, "fake_nvml: cannot read state file %s\n", path ? path : "(unset)");
        return UNKNOWN;
    }
    ngpus = 0;
    driver_version[0] = '\0';
    cuda_version = 0;
    while (fgets(line, sizeof line, f)) {
        chomp(line);
        if (sscanf(line, "init_error %d", &init_error) == 1) continue;
        if (strncmp(line, "driver ", 7) == 0) {
            copy_field(driver_version, sizeof driver_version, line + 7);
        } else if (sscanf(line, "cuda %d", &cuda_version) == 1) {
            continue;
        } else if (strncmp(line, "gpu ", 4) == 0 && ngpus < MAX_GPUS) {
            gpu_t *g = &gpus[ngpus];
            memset(g, 0, sizeof *g);
            n = (int)strlen(line);
            if (sscanf(line, "gpu %d %d %d %llu %llu %95s %n", &g->fail, &g->mig_current,
                       &g->mig_pending, &g->total, &g->used, g->uuid, &n) >= 6) {
                copy_field(g->name, sizeof g->name, line + n);
                g->numa = -1;
                ngpus++;
            }
        } else if (strncmp(line, "pci ", 4) == 0 && ngpus > 0) {
            copy_field(gpus[ngpus - 1].pci, sizeof gpus[ngpus - 1].pci, line + 4);
        } else if (sscanf(line, "numa %d", &n) == 1 && ngpus > 0) {
            gpus[ngpus - 1].numa = n;
        } else if (strncmp(line, "link ", 5) == 0 && ngpus > 0) {
            gpu_t *g = &gpus[ngpus - 1];
            link_t *l = &g->links[g->nlinks];
            if (g->nlinks < MAX_LINKS && sscanf(line, "link %d %31s", &l->active, l->remote) == 2)
                g->nlinks++;
        } else if (strncmp(line, "telemetry ", 10) == 0 && ngpus > 0) {
            gpu_t *g = &gpus[ngpus - 1];
            g->has_telemetry =
                sscanf(line, "telemetry %u %u %u", &g->util, &g->temp, &g->power_mw) == 3;
        } else if (strncmp(line, "proc ", 5) == 0 && ngpus > 0) {
            gpu_t *g = &gpus[ngpus - 1];
            if (g->nprocs < MAX_PROCS &&
                sscanf(line, "proc %u %llu", &g->procs[g->nprocs].pid,
                       &g->procs[g->nprocs].used) == 2)
                g->nprocs++;
        }
    }
    fclose(f);
    return init_error;
}

/* Common checks for a device query: initialised, valid handle, GPU present. */
static nvmlReturn_t check_device(nvmlDevice_t d, const void *out) {
    if (refcount == 0) return UNINITIALIZED;
    uintptr_t at = (uintptr_t)d, base = (uintptr_t)gpus;
    if (at < base || at >= base + (uintptr_t)ngpus * sizeof(gpu_t) || (at - base) % sizeof(gpu_t))
        return INVALID_ARGUMENT;
    if (out == NULL) return INVALID_ARGUMENT;
    return d->fail ? GPU_IS_LOST : OK;
}

static nvmlReturn_t copy_string(char *buf, unsigned int len, const char *value) {
    if (buf == NULL) return INVALID_ARGUMENT;
    if (strlen(value) + 1 > len) return INSUFFICIENT_SIZE;
    memcpy(buf, value, strlen(value) + 1);
    return OK;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    nvmlReturn_t rc = load_state();
    if (rc != OK) return rc;
    refcount++;
    return OK;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    if (refcount == 0) return UNINITIALIZED;
    refcount--;
    return OK;
}

const char *nvmlErrorString(nvmlReturn_t rc) {
    switch (rc) {
    case OK: return "Success";
    case UNINITIALIZED: return "Uninitialized";
    case INVALID_ARGUMENT: return "Invalid Argument";
    case NOT_SUPPORTED: return "Not Supported";
    case NOT_FOUND: return "Not Found";
    case INSUFFICIENT_SIZE: return "Insufficient Size";
    case DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case GPU_IS_LOST: return "GPU is lost";
    case ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (refcount == 0) return UNINITIALIZED;
    return copy_string(version, length, driver_version);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    if (refcount == 0) return UNINITIALIZED;
    if (version == NULL) return INVALID_ARGUMENT;
    *version = cuda_version;
    return OK;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    return nvmlSystemGetCudaDriverVersion(version);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (refcount == 0) return UNINITIALIZED;
    if (count == NULL) return INVALID_ARGUMENT;
    *count = (unsigned int)ngpus;
    return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (refcount == 0) return UNINITIALIZED;
    if (index >= (unsigned int)ngpus || device == NULL) return INVALID_ARGUMENT;
    if (gpus[index].fail == 2) return GPU_IS_LOST;
    *device = &gpus[index];
    return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (refcount == 0) return UNINITIALIZED;
    if (uuid == NULL || device == NULL) return INVALID_ARGUMENT;
    for (int i = 0; i < ngpus; i++) {
        if (strcmp(gpus[i].uuid, uuid) != 0) continue;
        if (gpus[i].fail == 2) return GPU_IS_LOST;
        *device = &gpus[i];
        return OK;
    }
    return NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    nvmlReturn_t rc = check_device(d, uuid);
    if (rc == GPU_IS_LOST && d->fail == 1) rc = OK; /* identity survives */
    return rc != OK ? rc : copy_string(uuid, length, d->uuid);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    nvmlReturn_t rc = check_device(d, name);
    return rc != OK ? rc : copy_string(name, length, d->name);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    nvmlReturn_t rc = check_device(d, index);
    if (rc == OK) *index = (unsigned int)(d - gpus);
    return rc;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *memory) {
    nvmlReturn_t rc = check_device(d, memory);
    if (rc != OK) return rc;
    memory->total = d->total;
    memory->used = d->used;
    memory->free = d->total - d->used;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *memory) {
    nvmlReturn_t rc = check_device(d, memory);
    if (rc != OK) return rc;
    if (memory->version != NVML_MEMORY_V2) return ARGUMENT_VERSION_MISMATCH;
    memory->total = d->total;
    memory->reserved = 0;
    memory->used = d->used;
    memory->free = d->total - d->used;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    nvmlReturn_t rc = check_device(d, current);
    if (rc != OK) return rc;
    if (pending == NULL) return INVALID_ARGUMENT;
    if (d->mig_current < 0) return NOT_SUPPORTED;
    *current = (unsigned int)d->mig_current;
    *pending = (unsigned int)d->mig_pending;
    return OK;
}

/* NVML's two-call protocol: too small a buffer (or none) reports the size. */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    nvmlReturn_t rc = check_device(d, count);
    if (rc != OK) return rc;
    unsigned int have = *count, need = (unsigned int)d->nprocs;
    *count = need;
    if (need == 0) return OK;
    if (infos == NULL || have < need) return INSUFFICIENT_SIZE;
    for (unsigned int i = 0; i < need; i++) {
        infos[i].pid = d->procs[i].pid;
        infos[i].usedGpuMemory = d->procs[i].used;
        infos[i].gpuInstanceId = 0xFFFFFFFFu; /* not a MIG instance */
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    return OK;
}

/* Fills an nvmlPciInfo_t from "DDDDDDDD:BB:DD.F"; NOT_SUPPORTED for anything else. */
static nvmlReturn_t fill_pci(nvmlPciInfo_t *pci, const char *bus_id) {
    unsigned int domain, bus, device, function;
    if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4)
        return NOT_SUPPORTED;
    domain &= 0xFFFFu; bus &= 0xFFu; device &= 0x1Fu; function &= 0x7u;
    memset(pci, 0, sizeof *pci);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = device;
    pci->pciDeviceId = 0x233010DEu; /* H100 SXM5, NVIDIA's vendor id */
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", domain, bus, device, function);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", domain, bus, device,
             function);
    return OK;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    nvmlReturn_t rc = check_device(d, pci);
    return rc != OK ? rc : fill_pci(pci, d->pci);
}

/* Common checks for an NVLink query: a GPU without links has no NVLink at all. */
static nvmlReturn_t check_link(nvmlDevice_t d, unsigned int link, const void *out) {
    nvmlReturn_t rc = check_device(d, out);
    if (rc != OK) return rc;
    if (d->nlinks == 0) return NOT_SUPPORTED;
    return link < (unsigned int)d->nlinks ? OK : INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, unsigned int *isActive) {
    nvmlReturn_t rc = check_link(d, link, isActive);
    if (rc == OK) *isActive = (unsigned int)d->links[link].active;
    return rc;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link,
                                                 nvmlPciInfo_t *pci) {
    nvmlReturn_t rc = check_link(d, link, pci);
    return rc != OK ? rc : fill_pci(pci, d->links[link].remote);
}

/* The NUMA node mask nearest the GPU: one bit, for scope NODE (0) and SOCKET (1) alike. */
nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t d, unsigned int nodeSetSize,
                                         unsigned long *nodeSet, unsigned int scope) {
    nvmlReturn_t rc = check_device(d, nodeSet);
    if (rc != OK) return rc;
    if (scope > 1) return INVALID_ARGUMENT;
    if (d->numa < 0) return NOT_SUPPORTED;
    if ((unsigned long)nodeSetSize * 64 <= (unsigned long)d->numa) return INSUFFICIENT_SIZE;
    memset(nodeSet, 0, nodeSetSize * sizeof *nodeSet);
    nodeSet[d->numa / 64] = 1UL << (d->numa % 64);
    return OK;
}

typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *util) {
    nvmlReturn_t rc = check_device(d, util);
    if (rc != OK) return rc;
    if (!d->has_telemetry) return NOT_SUPPORTED;
    util->gpu = d->util;
    util->memory = d->util;
    return OK;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temp) {
    nvmlReturn_t rc = check_device(d, temp);
    if (rc != OK) return rc;
    if (sensor != 0) return INVALID_ARGUMENT; /* NVML_TEMPERATURE_GPU */
    if (!d->has_telemetry) return NOT_SUPPORTED;
    *temp = d->temp;
    return OK;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power) {
    nvmlReturn_t rc = check_device(d, power);
    if (rc != OK) return rc;
    if (!d->has_telemetry) return NOT_SUPPORTED;
    *power = d->power_mw;
    return OK;
}
