/*
 * fake_nvml.c: a stand-in libnvidia-ml.so.1 for tests on hosts without a GPU.
 *
 * It implements exactly the NVML entry points that nvidia-ml-py 13.615.71
 * calls for gpudock's discovery, process, MIG, health and event queries, with
 * NVML's signatures, struct layouts and return codes. Nothing else is
 * exported, so any new pynvml call in gpudock fails loudly with
 * NVMLError_FunctionNotFound.
 *
 * State comes from the file named by GPUDOCK_FAKE_NVML_STATE. It is read on
 * every nvmlInit* and again by any call that finds the file changed (inode,
 * size or mtime), so a long-lived NVML session (gpudock's watchdog) sees what
 * a test writes next, as a real driver shows live processes. The Python side
 * (tests/kit/fake_nvml/__init__.py) validates a JSON-able dict and writes it,
 * atomically, in this line format:
 *
 *   init_error <code>                     0 = nvmlInit succeeds
 *   driver <version>
 *   cuda <int>                            e.g. 12040 for CUDA 12.4
 *   gpu <fail> <mig_cur> <mig_pend> <total> <used> <uuid> <name...>
 *   proc <pid> <used_bytes>               belongs to the preceding gpu (or mig)
 *   pci <bus_id>                          the preceding gpu's PCI bus id
 *   numa <node>                           its host NUMA node; -1 = not supported
 *   link <active> <remote_bus_id>         its next NVLink (0, 1, ...); active 0 or 1
 *   telemetry <util_pct> <temp_c> <mw>    its utilisation, temperature and power draw;
 *                                         without it those queries are NOT_SUPPORTED
 *   brand <nvml_brand>                    its nvmlBrandType_t (default 14, NVIDIA)
 *   arch <major> <minor>                  its CUDA compute capability (default 9.0)
 *   ecc <corrected> <uncorrected>         its volatile ECC error counts; without it
 *                                         nvmlDeviceGetTotalEccErrors is NOT_SUPPORTED
 *   events <0|1>                          0: event registration is NOT_SUPPORTED
 *   mig <gi> <ci> <total> <used> <uuid> <profile>
 *                                         a MIG device of the preceding gpu
 *   event <seq> <gpu_index> <type> <data> an NVML event (type: 8 XID, 1 SBE, 2 DBE);
 *                                         delivered once per event set, in seq
 *                                         order, if seq is above every seq the file
 *                                         held when the device was registered
 *
 * fail: 0 healthy; 1 handle and UUID work, other device queries return
 * GPU_IS_LOST; 2 even the handle lookup returns GPU_IS_LOST.
 * mig_cur/mig_pend: 0 or 1, or -1 when MIG is not supported.
 * Topology: without a pci line nvmlDeviceGetPciInfo_v3 is NOT_SUPPORTED; a gpu
 * with no link lines answers NOT_SUPPORTED for every link (a PCIe-only GPU),
 * one with N links answers INVALID_ARGUMENT for link >= N; memory affinity
 * (scope NODE or SOCKET) is the one-bit mask of its NUMA node.
 * MIG: a MIG device handle answers UUID, name ("<parent name> MIG <profile>"),
 * memory, processes, GPU/compute instance ids and its parent; GPU-wide
 * queries (PCI, NVLink, telemetry, ECC) on it are NOT_SUPPORTED. Its
 * processes are also listed on the parent with their instance ids.
 * Every entry point holds one mutex, so threads may call concurrently.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef int nvmlReturn_t;
enum {
    OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3,
    NOT_FOUND = 6, INSUFFICIENT_SIZE = 7, DRIVER_NOT_LOADED = 9, TIMEOUT = 10,
    GPU_IS_LOST = 15, ARGUMENT_VERSION_MISMATCH = 25, UNKNOWN = 999
};

#define MAX_GPUS 16
#define MAX_PROCS 32
#define MAX_LINKS 36 /* NVML_NVLINK_MAX_LINKS */
#define MAX_MIGS 64
#define MAX_MIG_PER_GPU 7
#define MAX_EVENTS 256
#define MAX_SETS 16
#define NVML_MEMORY_V2 0x02000028u
#define NO_INSTANCE 0xFFFFFFFFu
#define EVENT_SBE 0x1ull
#define EVENT_DBE 0x2ull
#define EVENT_XID 0x8ull

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
    unsigned int brand;
    int arch_major, arch_minor;
    int has_ecc;
    unsigned long long ecc_corrected, ecc_uncorrected;
    int events_supported;
} gpu_t;
typedef struct {
    int parent; /* index into gpus */
    unsigned int gi, ci;
    unsigned long long total, used;
    char uuid[96], profile[32];
    int nprocs;
    proc_t procs[MAX_PROCS];
} mig_t;
typedef struct {
    unsigned long long seq, type, data;
    int gpu;
} event_t;
typedef struct {
    int in_use;
    unsigned long long types[MAX_GPUS];     /* registered event types per GPU */
    unsigned long long floor[MAX_GPUS];     /* deliver only seq above this */
    unsigned long long delivered[MAX_GPUS]; /* highest seq delivered per GPU */
} eventset_t;
typedef void *nvmlDevice_t; /* a gpu_t* or a mig_t*, told apart by address */
typedef eventset_t *nvmlEventSet_t;

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
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int refcount;
static int ngpus, nmigs, nevents;
static gpu_t gpus[MAX_GPUS];
static mig_t migs[MAX_MIGS];
static event_t events[MAX_EVENTS];
static eventset_t sets[MAX_SETS];
static char driver_version[80];
static int cuda_version;
static struct stat loaded; /* the state file as last read */

static void chomp(char *s) { s[strcspn(s, "\r\n")] = '\0'; }

static void copy_field(char *dst, size_t cap, const char *src) { /* truncates */
    size_t n = strlen(src) < cap ? strlen(src) : cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static void new_gpu_defaults(gpu_t *g) {
    g->numa = -1;
    g->brand = 14; /* NVML_BRAND_NVIDIA */
    g->arch_major = 9;
    g->arch_minor = 0;
    g->events_supported = 1;
}

/* One line of the preceding gpu (g) or, for proc lines, of the preceding mig (m). */
static void gpu_line(const char *line, gpu_t *g, mig_t *m) {
    int n;
    if (strncmp(line, "pci ", 4) == 0) {
        copy_field(g->pci, sizeof g->pci, line + 4);
    } else if (sscanf(line, "numa %d", &n) == 1) {
        g->numa = n;
    } else if (strncmp(line, "link ", 5) == 0) {
        link_t *l = &g->links[g->nlinks];
        if (g->nlinks < MAX_LINKS && sscanf(line, "link %d %31s", &l->active, l->remote) == 2)
            g->nlinks++;
    } else if (strncmp(line, "telemetry ", 10) == 0) {
        g->has_telemetry =
            sscanf(line, "telemetry %u %u %u", &g->util, &g->temp, &g->power_mw) == 3;
    } else if (sscanf(line, "brand %u", &g->brand) == 1) {
    } else if (sscanf(line, "arch %d %d", &g->arch_major, &g->arch_minor) == 2) {
    } else if (strncmp(line, "ecc ", 4) == 0) {
        g->has_ecc =
            sscanf(line, "ecc %llu %llu", &g->ecc_corrected, &g->ecc_uncorrected) == 2;
    } else if (sscanf(line, "events %d", &g->events_supported) == 1) {
    } else if (strncmp(line, "proc ", 5) == 0) {
        int *count = m ? &m->nprocs : &g->nprocs;
        proc_t *procs = m ? m->procs : g->procs;
        if (*count < MAX_PROCS &&
            sscanf(line, "proc %u %llu", &procs[*count].pid, &procs[*count].used) == 2)
            (*count)++;
    }
}

/* Loads the state file; returns 0, the configured init_error, or UNKNOWN. */
static nvmlReturn_t load_state(void) {
    const char *path = getenv("GPUDOCK_FAKE_NVML_STATE");
    FILE *f = path ? fopen(path, "r") : NULL;
    char line[512];
    int init_error = 0, n;
    mig_t *mig = NULL;
    if (!f) {
        fprintf(stderr, "fake_nvml: cannot read state file %s\n", path ? path : "(unset)");
        return UNKNOWN;
    }
    fstat(fileno(f), &loaded);
    ngpus = nmigs = nevents = 0;
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
                new_gpu_defaults(g);
                ngpus++;
                mig = NULL;
            }
        } else if (strncmp(line, "mig ", 4) == 0 && ngpus > 0 && nmigs < MAX_MIGS) {
            mig_t *m = &migs[nmigs];
            memset(m, 0, sizeof *m);
            if (sscanf(line, "mig %u %u %llu %llu %95s %31s", &m->gi, &m->ci, &m->total,
                       &m->used, m->uuid, m->profile) == 6) {
                m->parent = ngpus - 1;
                mig = m;
                nmigs++;
            }
        } else if (strncmp(line, "event ", 6) == 0 && nevents < MAX_EVENTS) {
            event_t *e = &events[nevents];
            if (sscanf(line, "event %llu %d %llu %llu", &e->seq, &e->gpu, &e->type, &e->data) == 4)
                nevents++;
        } else if (ngpus > 0) {
            gpu_line(line, &gpus[ngpus - 1], mig);
        }
    }
    fclose(f);
    return init_error;
}

/* Re-reads the state when the file changed since it was loaded (a new inode: the
 * Python side replaces it atomically). A failed re-read keeps the old state. */
static void refresh(void) {
    const char *path = getenv("GPUDOCK_FAKE_NVML_STATE");
    struct stat now;
    if (!path || stat(path, &now) != 0) return;
    if (now.st_ino == loaded.st_ino && now.st_size == loaded.st_size &&
        now.st_mtim.tv_sec == loaded.st_mtim.tv_sec &&
        now.st_mtim.tv_nsec == loaded.st_mtim.tv_nsec)
        return;
    load_state();
}

static gpu_t *as_gpu(nvmlDevice_t d) {
    uintptr_t at = (uintptr_t)d, base = (uintptr_t)gpus;
    if (at < base || at >= base + (uintptr_t)ngpus * sizeof(gpu_t) || (at - base) % sizeof(gpu_t))
        return NULL;
    return (gpu_t *)d;
}

static mig_t *as_mig(nvmlDevice_t d) {
    uintptr_t at = (uintptr_t)d, base = (uintptr_t)migs;
    if (at < base || at >= base + (uintptr_t)nmigs * sizeof(mig_t) || (at - base) % sizeof(mig_t))
        return NULL;
    return (mig_t *)d;
}

/* Common checks: initialised (state refreshed), output given, device valid and not
 * lost. Sets *g to the GPU (for a MIG handle: its parent) and *m to the MIG or NULL. */
static nvmlReturn_t check_any(nvmlDevice_t d, const void *out, gpu_t **g, mig_t **m) {
    if (refcount == 0) return UNINITIALIZED;
    refresh();
    *m = as_mig(d);
    *g = *m ? &gpus[(*m)->parent] : as_gpu(d);
    if (*g == NULL) return INVALID_ARGUMENT;
    if (out == NULL) return INVALID_ARGUMENT;
    return (*g)->fail ? GPU_IS_LOST : OK;
}

/* As check_any, for a query that only a whole GPU answers (MIG handle: NOT_SUPPORTED). */
static nvmlReturn_t check_gpu(nvmlDevice_t d, const void *out, gpu_t **g) {
    mig_t *m;
    nvmlReturn_t rc = check_any(d, out, g, &m);
    if (rc == OK && m != NULL) return NOT_SUPPORTED;
    return rc;
}

static nvmlReturn_t check_init(void) {
    if (refcount == 0) return UNINITIALIZED;
    refresh();
    return OK;
}

static nvmlReturn_t copy_string(char *buf, unsigned int len, const char *value) {
    if (buf == NULL) return INVALID_ARGUMENT;
    if (strlen(value) + 1 > len) return INSUFFICIENT_SIZE;
    memcpy(buf, value, strlen(value) + 1);
    return OK;
}

#define LOCKED(expr)                                                                     \
    do {                                                                                 \
        pthread_mutex_lock(&lock);                                                       \
        nvmlReturn_t rc_ = (expr);                                                       \
        pthread_mutex_unlock(&lock);                                                     \
        return rc_;                                                                      \
    } while (0)

/* ---- init, errors, system ---------------------------------------------------- */

static nvmlReturn_t init_impl(void) {
    nvmlReturn_t rc = load_state();
    if (rc != OK) return rc;
    refcount++;
    return OK;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    LOCKED(init_impl());
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

static nvmlReturn_t shutdown_impl(void) {
    if (refcount == 0) return UNINITIALIZED;
    refcount--;
    return OK;
}

nvmlReturn_t nvmlShutdown(void) { LOCKED(shutdown_impl()); }

const char *nvmlErrorString(nvmlReturn_t rc) {
    switch (rc) {
    case OK: return "Success";
    case UNINITIALIZED: return "Uninitialized";
    case INVALID_ARGUMENT: return "Invalid Argument";
    case NOT_SUPPORTED: return "Not Supported";
    case NOT_FOUND: return "Not Found";
    case INSUFFICIENT_SIZE: return "Insufficient Size";
    case DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case TIMEOUT: return "Timeout";
    case GPU_IS_LOST: return "GPU is lost";
    case ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t driver_impl(char *version, unsigned int length) {
    nvmlReturn_t rc = check_init();
    return rc != OK ? rc : copy_string(version, length, driver_version);
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    LOCKED(driver_impl(version, length));
}

static nvmlReturn_t cuda_impl(int *version) {
    nvmlReturn_t rc = check_init();
    if (rc != OK) return rc;
    if (version == NULL) return INVALID_ARGUMENT;
    *version = cuda_version;
    return OK;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) { LOCKED(cuda_impl(version)); }

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { LOCKED(cuda_impl(version)); }

/* ---- handles ------------------------------------------------------------------ */

static nvmlReturn_t count_impl(unsigned int *count) {
    nvmlReturn_t rc = check_init();
    if (rc != OK) return rc;
    if (count == NULL) return INVALID_ARGUMENT;
    *count = (unsigned int)ngpus;
    return OK;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { LOCKED(count_impl(count)); }

static nvmlReturn_t by_index_impl(unsigned int index, nvmlDevice_t *device) {
    nvmlReturn_t rc = check_init();
    if (rc != OK) return rc;
    if (index >= (unsigned int)ngpus || device == NULL) return INVALID_ARGUMENT;
    if (gpus[index].fail == 2) return GPU_IS_LOST;
    *device = &gpus[index];
    return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    LOCKED(by_index_impl(index, device));
}

static nvmlReturn_t by_uuid_impl(const char *uuid, nvmlDevice_t *device) {
    nvmlReturn_t rc = check_init();
    if (rc != OK) return rc;
    if (uuid == NULL || device == NULL) return INVALID_ARGUMENT;
    for (int i = 0; i < ngpus; i++) {
        if (strcmp(gpus[i].uuid, uuid) != 0) continue;
        if (gpus[i].fail == 2) return GPU_IS_LOST;
        *device = &gpus[i];
        return OK;
    }
    for (int i = 0; i < nmigs; i++) {
        if (strcmp(migs[i].uuid, uuid) != 0) continue;
        if (gpus[migs[i].parent].fail == 2) return GPU_IS_LOST;
        *device = &migs[i];
        return OK;
    }
    return NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    LOCKED(by_uuid_impl(uuid, device));
}

/* ---- identity and memory -------------------------------------------------------- */

static nvmlReturn_t uuid_impl(nvmlDevice_t d, char *uuid, unsigned int length) {
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t rc = check_any(d, uuid, &g, &m);
    if (rc == GPU_IS_LOST && g->fail == 1) rc = OK; /* identity survives */
    return rc != OK ? rc : copy_string(uuid, length, m ? m->uuid : g->uuid);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    LOCKED(uuid_impl(d, uuid, length));
}

static nvmlReturn_t name_impl(nvmlDevice_t d, char *name, unsigned int length) {
    gpu_t *g;
    mig_t *m;
    char full[160];
    nvmlReturn_t rc = check_any(d, name, &g, &m);
    if (rc != OK) return rc;
    if (m == NULL) return copy_string(name, length, g->name);
    snprintf(full, sizeof full, "%s MIG %s", g->name, m->profile);
    return copy_string(name, length, full);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    LOCKED(name_impl(d, name, length));
}

static nvmlReturn_t index_impl(nvmlDevice_t d, unsigned int *index) {
    gpu_t *g;
    nvmlReturn_t rc = check_gpu(d, index, &g);
    if (rc == OK) *index = (unsigned int)(g - gpus);
    return rc;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    LOCKED(index_impl(d, index));
}

static nvmlReturn_t memory_impl(nvmlDevice_t d, nvmlMemory_t *memory) {
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t rc = check_any(d, memory, &g, &m);
    if (rc != OK) return rc;
    memory->total = m ? m->total : g->total;
    memory->used = m ? m->used : g->used;
    memory->free = memory->total - memory->used;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *memory) {
    LOCKED(memory_impl(d, memory));
}

static nvmlReturn_t memory_v2_impl(nvmlDevice_t d, nvmlMemory_v2_t *memory) {
    nvmlMemory_t plain;
    nvmlReturn_t rc = memory_impl(d, memory == NULL ? NULL : &plain);
    if (rc != OK) return rc;
    if (memory->version != NVML_MEMORY_V2) return ARGUMENT_VERSION_MISMATCH;
    memory->total = plain.total;
    memory->reserved = 0;
    memory->used = plain.used;
    memory->free = plain.free;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *memory) {
    LOCKED(memory_v2_impl(d, memory));
}

static nvmlReturn_t brand_impl(nvmlDevice_t d, unsigned int *brand) {
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t rc = check_any(d, brand, &g, &m);
    if (rc == OK) *brand = g->brand;
    return rc;
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, unsigned int *brand) {
    LOCKED(brand_impl(d, brand));
}

static nvmlReturn_t arch_impl(nvmlDevice_t d, int *major, int *minor) {
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t rc = check_any(d, major, &g, &m);
    if (rc != OK) return rc;
    if (minor == NULL) return INVALID_ARGUMENT;
    *major = g->arch_major;
    *minor = g->arch_minor;
    return OK;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    LOCKED(arch_impl(d, major, minor));
}

/* ---- MIG ---------------------------------------------------------------------------- */

static nvmlReturn_t mig_mode_impl(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    gpu_t *g;
    nvmlReturn_t rc = check_gpu(d, current, &g);
    if (rc != OK) return rc;
    if (pending == NULL) return INVALID_ARGUMENT;
    if (g->mig_current < 0) return NOT_SUPPORTED;
    *current = (unsigned int)g->mig_current;
    *pending = (unsigned int)g->mig_pending;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    LOCKED(mig_mode_impl(d, current, pending));
}

static nvmlReturn_t max_mig_impl(nvmlDevice_t d, unsigned int *count) {
    gpu_t *g;
    nvmlReturn_t rc = check_gpu(d, count, &g);
    if (rc != OK) return rc;
    if (g->mig_current < 0) return NOT_SUPPORTED;
    *count = MAX_MIG_PER_GPU;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    LOCKED(max_mig_impl(d, count));
}

/* The index-th MIG device of a GPU in MIG mode; NOT_FOUND for an empty slot. */
static nvmlReturn_t mig_by_index_impl(nvmlDevice_t d, unsigned int index, nvmlDevice_t *out) {
    gpu_t *g;
    nvmlReturn_t rc = check_gpu(d, out, &g);
    unsigned int seen = 0;
    if (rc != OK) return rc;
    if (g->mig_current < 0) return NOT_SUPPORTED;
    if (index >= MAX_MIG_PER_GPU) return INVALID_ARGUMENT;
    if (g->mig_current != 1) return NOT_FOUND;
    for (int i = 0; i < nmigs; i++) {
        if (migs[i].parent != g - gpus) continue;
        if (seen++ == index) {
            *out = &migs[i];
            return OK;
        }
    }
    return NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index,
                                                 nvmlDevice_t *out) {
    LOCKED(mig_by_index_impl(d, index, out));
}

static nvmlReturn_t mig_parent_impl(nvmlDevice_t d, nvmlDevice_t *parent) {
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t rc = check_any(d, parent, &g, &m);
    if (rc != OK && rc != GPU_IS_LOST) return rc;
    if (m == NULL) return INVALID_ARGUMENT;
    *parent = g;
    return OK;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t d, nvmlDevice_t *parent) {
    LOCKED(mig_parent_impl(d, parent));
}

static nvmlReturn_t is_mig_impl(nvmlDevice_t d, unsigned int *is_mig) {
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t rc = check_any(d, is_mig, &g, &m);
    if (rc != OK && rc != GPU_IS_LOST) return rc;
    *is_mig = m != NULL;
    return OK;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is_mig) {
    LOCKED(is_mig_impl(d, is_mig));
}

static nvmlReturn_t instance_impl(nvmlDevice_t d, unsigned int *id, int compute) {
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t rc = check_any(d, id, &g, &m);
    if (rc != OK) return rc;
    if (m == NULL) return INVALID_ARGUMENT;
    *id = compute ? m->ci : m->gi;
    return OK;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    LOCKED(instance_impl(d, id, 0));
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
    LOCKED(instance_impl(d, id, 1));
}

/* ---- processes -------------------------------------------------------------------- */

static void put_proc(nvmlProcessInfo_t *info, const proc_t *p, unsigned int gi, unsigned int ci) {
    info->pid = p->pid;
    info->usedGpuMemory = p->used;
    info->gpuInstanceId = gi;
    info->computeInstanceId = ci;
}

/* NVML's two-call protocol: too small a buffer (or none) reports the size. A GPU lists
 * its own processes and those of its MIG devices; a MIG device lists its own. */
static nvmlReturn_t procs_impl(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos) {
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t rc = check_any(d, count, &g, &m);
    unsigned int have, need = 0, at = 0;
    if (rc != OK) return rc;
    have = *count;
    if (m) {
        need = (unsigned int)m->nprocs;
    } else {
        need = (unsigned int)g->nprocs;
        for (int i = 0; i < nmigs; i++)
            if (migs[i].parent == g - gpus) need += (unsigned int)migs[i].nprocs;
    }
    *count = need;
    if (need == 0) return OK;
    if (infos == NULL || have < need) return INSUFFICIENT_SIZE;
    if (m) {
        for (int i = 0; i < m->nprocs; i++) put_proc(&infos[at++], &m->procs[i], m->gi, m->ci);
        return OK;
    }
    for (int i = 0; i < g->nprocs; i++)
        put_proc(&infos[at++], &g->procs[i], NO_INSTANCE, NO_INSTANCE);
    for (int i = 0; i < nmigs; i++) {
        if (migs[i].parent != g - gpus) continue;
        for (int j = 0; j < migs[i].nprocs; j++)
            put_proc(&infos[at++], &migs[i].procs[j], migs[i].gi, migs[i].ci);
    }
    return OK;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    LOCKED(procs_impl(d, count, infos));
}

/* ---- topology ------------------------------------------------------------------------ */

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

static nvmlReturn_t pci_impl(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    gpu_t *g;
    nvmlReturn_t rc = check_gpu(d, pci, &g);
    return rc != OK ? rc : fill_pci(pci, g->pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    LOCKED(pci_impl(d, pci));
}

/* Common checks for an NVLink query: a GPU without links has no NVLink at all. */
static nvmlReturn_t check_link(nvmlDevice_t d, unsigned int link, const void *out, gpu_t **g) {
    nvmlReturn_t rc = check_gpu(d, out, g);
    if (rc != OK) return rc;
    if ((*g)->nlinks == 0) return NOT_SUPPORTED;
    return link < (unsigned int)(*g)->nlinks ? OK : INVALID_ARGUMENT;
}

static nvmlReturn_t link_state_impl(nvmlDevice_t d, unsigned int link, unsigned int *active) {
    gpu_t *g;
    nvmlReturn_t rc = check_link(d, link, active, &g);
    if (rc == OK) *active = (unsigned int)g->links[link].active;
    return rc;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, unsigned int *isActive) {
    LOCKED(link_state_impl(d, link, isActive));
}

static nvmlReturn_t link_remote_impl(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci) {
    gpu_t *g;
    nvmlReturn_t rc = check_link(d, link, pci, &g);
    return rc != OK ? rc : fill_pci(pci, g->links[link].remote);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link,
                                                 nvmlPciInfo_t *pci) {
    LOCKED(link_remote_impl(d, link, pci));
}

/* The NUMA node mask nearest the GPU: one bit, for scope NODE (0) and SOCKET (1) alike. */
static nvmlReturn_t affinity_impl(nvmlDevice_t d, unsigned int size, unsigned long *set,
                                  unsigned int scope) {
    gpu_t *g;
    nvmlReturn_t rc = check_gpu(d, set, &g);
    if (rc != OK) return rc;
    if (scope > 1) return INVALID_ARGUMENT;
    if (g->numa < 0) return NOT_SUPPORTED;
    if ((unsigned long)size * 64 <= (unsigned long)g->numa) return INSUFFICIENT_SIZE;
    memset(set, 0, size * sizeof *set);
    set[g->numa / 64] = 1UL << (g->numa % 64);
    return OK;
}

nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t d, unsigned int nodeSetSize,
                                         unsigned long *nodeSet, unsigned int scope) {
    LOCKED(affinity_impl(d, nodeSetSize, nodeSet, scope));
}

/* ---- telemetry and ECC ------------------------------------------------------------------ */

typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;

static nvmlReturn_t util_impl(nvmlDevice_t d, nvmlUtilization_t *util) {
    gpu_t *g;
    nvmlReturn_t rc = check_gpu(d, util, &g);
    if (rc != OK) return rc;
    if (!g->has_telemetry) return NOT_SUPPORTED;
    util->gpu = g->util;
    util->memory = g->util;
    return OK;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *util) {
    LOCKED(util_impl(d, util));
}

static nvmlReturn_t temp_impl(nvmlDevice_t d, int sensor, unsigned int *temp) {
    gpu_t *g;
    nvmlReturn_t rc = check_gpu(d, temp, &g);
    if (rc != OK) return rc;
    if (sensor != 0) return INVALID_ARGUMENT; /* NVML_TEMPERATURE_GPU */
    if (!g->has_telemetry) return NOT_SUPPORTED;
    *temp = g->temp;
    return OK;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temp) {
    LOCKED(temp_impl(d, sensor, temp));
}

static nvmlReturn_t power_impl(nvmlDevice_t d, unsigned int *power) {
    gpu_t *g;
    nvmlReturn_t rc = check_gpu(d, power, &g);
    if (rc != OK) return rc;
    if (!g->has_telemetry) return NOT_SUPPORTED;
    *power = g->power_mw;
    return OK;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power) {
    LOCKED(power_impl(d, power));
}

/* errorType 0 corrected, 1 uncorrected; counterType 0 volatile, 1 aggregate (the same here). */
static nvmlReturn_t ecc_impl(nvmlDevice_t d, int error_type, int counter_type,
                             unsigned long long *count) {
    gpu_t *g;
    nvmlReturn_t rc = check_gpu(d, count, &g);
    if (rc != OK) return rc;
    if (error_type < 0 || error_type > 1 || counter_type < 0 || counter_type > 1)
        return INVALID_ARGUMENT;
    if (!g->has_ecc) return NOT_SUPPORTED;
    *count = error_type ? g->ecc_uncorrected : g->ecc_corrected;
    return OK;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int errorType, int counterType,
                                         unsigned long long *eccCounts) {
    LOCKED(ecc_impl(d, errorType, counterType, eccCounts));
}

/* ---- events ---------------------------------------------------------------------------- */

static eventset_t *as_set(nvmlEventSet_t set) {
    uintptr_t at = (uintptr_t)set, base = (uintptr_t)sets;
    if (at < base || at >= base + sizeof sets || (at - base) % sizeof(eventset_t)) return NULL;
    return set->in_use ? set : NULL;
}

static nvmlReturn_t set_create_impl(nvmlEventSet_t *set) {
    nvmlReturn_t rc = check_init();
    if (rc != OK) return rc;
    if (set == NULL) return INVALID_ARGUMENT;
    for (int i = 0; i < MAX_SETS; i++) {
        if (sets[i].in_use) continue;
        memset(&sets[i], 0, sizeof sets[i]);
        sets[i].in_use = 1;
        *set = &sets[i];
        return OK;
    }
    return UNKNOWN;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) { LOCKED(set_create_impl(set)); }

static nvmlReturn_t supported_events_impl(nvmlDevice_t d, unsigned long long *types) {
    gpu_t *g;
    nvmlReturn_t rc = check_gpu(d, types, &g);
    if (rc != OK) return rc;
    if (!g->events_supported) return NOT_SUPPORTED;
    *types = EVENT_XID | (g->has_ecc ? EVENT_SBE | EVENT_DBE : 0);
    return OK;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    LOCKED(supported_events_impl(d, types));
}

static nvmlReturn_t register_impl(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    gpu_t *g;
    unsigned long long supported, top = 0;
    eventset_t *s = as_set(set);
    nvmlReturn_t rc = supported_events_impl(d, &supported);
    if (rc != OK) return rc;
    if (s == NULL) return INVALID_ARGUMENT;
    if (types & ~supported) return NOT_SUPPORTED;
    g = as_gpu(d);
    for (int i = 0; i < nevents; i++)
        if (events[i].seq > top) top = events[i].seq;
    s->types[g - gpus] |= types;
    s->floor[g - gpus] = top;
    return OK;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long eventTypes,
                                      nvmlEventSet_t set) {
    LOCKED(register_impl(d, eventTypes, set));
}

/* The registered, undelivered event with the lowest seq, or NULL. */
static event_t *next_event(eventset_t *s) {
    event_t *best = NULL;
    for (int i = 0; i < nevents; i++) {
        event_t *e = &events[i];
        if (e->gpu < 0 || e->gpu >= ngpus || !(s->types[e->gpu] & e->type)) continue;
        if (e->seq <= s->floor[e->gpu] || e->seq <= s->delivered[e->gpu]) continue;
        if (best == NULL || e->seq < best->seq) best = e;
    }
    return best;
}

/* Waits up to timeoutms for an event, re-reading the state file every 5 ms. */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                 unsigned int timeoutms) {
    struct timespec nap = {0, 5 * 1000 * 1000};
    unsigned int waited = 0;
    for (;;) {
        pthread_mutex_lock(&lock);
        eventset_t *s = as_set(set);
        nvmlReturn_t rc = check_init();
        event_t *e = NULL;
        if (rc == OK && (s == NULL || data == NULL)) rc = INVALID_ARGUMENT;
        if (rc == OK && (e = next_event(s)) != NULL) {
            s->delivered[e->gpu] = e->seq;
            data->device = &gpus[e->gpu];
            data->eventType = e->type;
            data->eventData = e->data;
            data->gpuInstanceId = NO_INSTANCE;
            data->computeInstanceId = NO_INSTANCE;
        }
        pthread_mutex_unlock(&lock);
        if (rc != OK || e != NULL) return rc;
        if (waited >= timeoutms) return TIMEOUT;
        nanosleep(&nap, NULL);
        waited += 5;
    }
}

static nvmlReturn_t set_free_impl(nvmlEventSet_t set) {
    eventset_t *s = as_set(set);
    if (s == NULL) return INVALID_ARGUMENT;
    s->in_use = 0;
    return OK;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { LOCKED(set_free_impl(set)); }
