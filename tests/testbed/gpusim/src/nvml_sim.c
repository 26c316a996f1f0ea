/*
 * Simulated NVML: a libnvidia-ml.so.1 that the unmodified pynvml (nvidia-ml-py) loads.
 *
 * The hardware is a state file named by $GPUFLEET_SIM_NVML_STATE, written by
 * tests/testbed/gpusim/hoststate.py (format: docs/DEVELOPING.md, "Simulated NVML").
 * It is read again at every nvmlInit and whenever it changed on disk (stat), under a
 * shared flock on "<state>.lock"; every mutating call re-reads, changes and atomically
 * replaces it under an exclusive flock, so separate processes see one host.
 *
 * Semantics follow the NVML reference (nvml.h as mirrored in NVIDIA/go-nvml):
 *  - profile calls take NVML_GPU_INSTANCE_PROFILE_* indexes, create/placement/capacity calls
 *    take the profile *id* (nvidia-smi "Profile ID");
 *  - nvmlDeviceSetMigMode "may unbind or reset the device to activate the requested mode";
 *    where reset is not exposed (VM) activationStatus is NVML_ERROR_RESET_REQUIRED, and with
 *    processes on the GPU the mode stays pending with activationStatus NVML_ERROR_IN_USE;
 *  - a GPU instance created without a placement takes the free placement with the HIGHEST start:
 *    this is the rule that reproduces NVIDIA's documented A100 fact (MIG user guide, "Getting
 *    Started"): -cgi 19,19,14,9 fails with Insufficient Resources, 9,19,14,19 succeeds
 *    (lowest-start would make both succeed). Derived, not read from the driver.
 *  - GPU instance ids follow the placement (memory-slice buddy tree: full=0, halves 1-2,
 *    quarters 3-6, eighths 7-14 on 8-slice GPUs). Derived.
 * Symbols pynvml may ask for that are not here stay absent: pynvml raises FUNCTION_NOT_FOUND.
 */
#define _GNU_SOURCE /* PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP, st_mtim */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ---- NVML ABI (values and layouts as in nvml.h; checked against pynvml 13.615.71) ---- */
typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_TIMEOUT = 10, NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12, NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14, NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17, NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18, NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20, NVML_ERROR_NO_DATA = 21, NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23, NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25, NVML_ERROR_DEPRECATED = 26, NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28, NVML_ERROR_INVALID_STATE = 29, NVML_ERROR_UNKNOWN = 999
};
#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT 0x1
#define NVML_INVALID_ID 0xFFFFFFFFu
#define MIB 1048576ULL

struct sim_handle;
typedef struct sim_handle *nvmlDevice_t, *nvmlGpuInstance_t, *nvmlComputeInstance_t;

typedef struct { unsigned int start, size; } nvmlGpuInstancePlacement_t, nvmlComputeInstancePlacement_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
#define nvmlMemory_v2 0x02000028u
typedef struct {
    unsigned int pid; unsigned long long usedGpuMemory; unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
        decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;
typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
        copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} nvmlGpuInstanceProfileInfo_v2_t;
typedef struct {
    unsigned int version, id, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
        decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
    unsigned int capabilities;
} nvmlGpuInstanceProfileInfo_v3_t;
#define nvmlGpuInstanceProfileInfo_v2 ((unsigned)(sizeof(nvmlGpuInstanceProfileInfo_v2_t) | (2u << 24)))
#define nvmlGpuInstanceProfileInfo_v3 ((unsigned)(sizeof(nvmlGpuInstanceProfileInfo_v3_t) | (3u << 24)))
typedef struct {
    unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
        sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;
typedef struct {
    unsigned int version, id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
        sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    char name[96];
} nvmlComputeInstanceProfileInfo_v2_t;
typedef struct {
    unsigned int version, id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
        sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    char name[96];
    unsigned int capabilities;
} nvmlComputeInstanceProfileInfo_v3_t;
#define nvmlComputeInstanceProfileInfo_v2 ((unsigned)(sizeof(nvmlComputeInstanceProfileInfo_v2_t) | (2u << 24)))
#define nvmlComputeInstanceProfileInfo_v3 ((unsigned)(sizeof(nvmlComputeInstanceProfileInfo_v3_t) | (3u << 24)))
typedef struct {
    nvmlDevice_t device; unsigned int id, profileId; nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;
typedef struct {
    nvmlDevice_t device; nvmlGpuInstance_t gpuInstance; unsigned int id, profileId;
    nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;
typedef struct {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount,
        sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

/* ---- simulated host state (mirror of hoststate.py records) ---- */
#define MAX_GPUS 16
#define MAX_GIP 24
#define MAX_CIP 64
#define MAX_GI 16   /* GI ids 0..14 on 8-slice GPUs */
#define MAX_CI_PER_GI 8
#define MAX_CI 64
#define MAX_PROC 64
#define MAX_FAULTS 64
#define MAX_PLC 16
#define STR 128
#define EXTRA 512

typedef struct { int start, size; } plc_t;
typedef struct {
    int index, id, slices, instances, sms, ce, dec, enc, jpeg, ofa, p2p, nplc;
    unsigned long long mem_mb; char name[STR]; plc_t plc[MAX_PLC]; char extra[EXTRA];
} gip_t;
typedef struct {
    int gip, index, id, slices, instances, sms, nplc; char name[STR]; plc_t plc[MAX_PLC]; char extra[EXTRA];
} cip_t;
typedef struct { int id, profile, start, size; char extra[EXTRA]; } gi_t;
typedef struct { int gi, id, profile, start, size; char uuid[STR]; char extra[EXTRA]; } ci_t;
typedef struct { unsigned int pid; unsigned long long used_mb; int gi, ci; char name[STR]; char extra[EXTRA]; } proc_t;
typedef struct {
    int index, bus, mig_capable, mig_current, mig_pending, mem_slices, compute_slices, max_mig, arch,
        cc_major, cc_minor, sms, persistence;
    unsigned long long mem_total, mem_reserved_mb;
    unsigned int pci_device_id, pci_subsystem_id;
    char model[STR], name[STR], uuid[STR], serial[STR], vbios[STR], board[STR], extra[EXTRA];
    int ngip, ncip, ngi, nci, nproc;
    gip_t gip[MAX_GIP]; cip_t cip[MAX_CIP]; gi_t gi[MAX_GI]; ci_t ci[MAX_CI]; proc_t proc[MAX_PROC];
} gpu_t;
/* times: how often the fault still fires (-1: every time); at 0 it is off (value 0), its record kept. */
typedef struct { int gpu, value, times; char name[STR]; char extra[EXTRA]; } fault_t;
typedef struct {
    char driver[STR], nvml[STR], host_extra[EXTRA]; int cuda, boot;
    int nfault; fault_t fault[MAX_FAULTS];
    int ngpu; gpu_t gpu[MAX_GPUS];
} state_t;

static state_t S;
static int init_count = 0;
static char state_path[4096];
static struct stat loaded_stat;
static int loaded = 0;
static int lock_fd = -1;

/* Handles: stable addresses in static tables, validated against the current state per call. */
enum { H_DEVICE = 1, H_GI = 2, H_CI = 3, H_MIG = 4 };
#define HANDLE_MAGIC 0x6e766d6cu
struct sim_handle { unsigned int magic; int kind, gpu, gi, ci; };
static struct sim_handle dev_h[MAX_GPUS], gi_h[MAX_GPUS][MAX_GI], ci_h[MAX_GPUS][MAX_GI][MAX_CI_PER_GI],
    mig_h[MAX_GPUS][MAX_GI][MAX_CI_PER_GI];

static void warn(const char *fmt, ...) {
    va_list ap; va_start(ap, fmt);
    fprintf(stderr, "nvml_sim: "); vfprintf(stderr, fmt, ap); fputc('\n', stderr);
    va_end(ap);
}

static struct sim_handle *mk(struct sim_handle *h, int kind, int gpu, int gi, int ci) {
    h->magic = HANDLE_MAGIC; h->kind = kind; h->gpu = gpu; h->gi = gi; h->ci = ci;
    return h;
}
static nvmlDevice_t device_handle(int g) { return mk(&dev_h[g], H_DEVICE, g, -1, -1); }
static nvmlGpuInstance_t gi_handle(int g, int gi) { return mk(&gi_h[g][gi], H_GI, g, gi, -1); }
static nvmlComputeInstance_t ci_handle(int g, int gi, int ci) { return mk(&ci_h[g][gi][ci], H_CI, g, gi, ci); }
static nvmlDevice_t mig_handle(int g, int gi, int ci) { return mk(&mig_h[g][gi][ci], H_MIG, g, gi, ci); }

/* ---- text format ---- */
static void pct_decode(char *dst, size_t cap, const char *src) {
    size_t n = 0;
    for (; *src && n + 1 < cap; src++) {
        if (*src == '%' && src[1] && src[2]) {
            char hex[3] = {src[1], src[2], 0};
            dst[n++] = (char)strtol(hex, NULL, 16); src += 2;
        } else dst[n++] = *src;
    }
    dst[n] = 0;
}
static void pct_encode(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("._:,+-/", c))
            fputc(c, f);
        else fprintf(f, "%%%02X", c);
    }
}
static void parse_placements(const char *v, plc_t *plc, int *n) {
    *n = 0;
    while (*v && *n < MAX_PLC) {
        int s, z;
        if (sscanf(v, "%d:%d", &s, &z) == 2) { plc[*n].start = s; plc[*n].size = z; (*n)++; }
        const char *comma = strchr(v, ',');
        if (!comma) break;
        v = comma + 1;
    }
}
static void add_extra(char *extra, const char *token) {
    size_t used = strlen(extra);
    if (used + strlen(token) + 2 < EXTRA) { strcat(extra, " "); strcat(extra, token); }
}

#define KEY(k) (strcmp(key, k) == 0)
#define IV strtoll(val, NULL, 0)
static int parse_state(const char *text) {
    memset(&S, 0, sizeof S);
    int header = 0;
    const char *line = text;
    while (*line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[8192];
        if (len >= sizeof buf) { warn("state line too long"); return -1; }
        memcpy(buf, line, len); buf[len] = 0;
        line = end ? end + 1 : line + len;
        if (!buf[0] || buf[0] == '#') continue;
        char *save = NULL, *kind = strtok_r(buf, " \t", &save);
        if (!kind) continue;
        gpu_t *g = S.ngpu ? &S.gpu[S.ngpu - 1] : NULL;
        gip_t *gp = NULL; cip_t *cp = NULL; gi_t *gi = NULL; ci_t *ci = NULL; proc_t *pr = NULL; fault_t *ft = NULL;
        char *extra;
        if (!strcmp(kind, "gpusim")) { header = 1; extra = NULL; }
        else if (!strcmp(kind, "host")) extra = S.host_extra;
        else if (!strcmp(kind, "fault")) {
            if (S.nfault >= MAX_FAULTS) return -1;
            ft = &S.fault[S.nfault++]; ft->gpu = -1; ft->times = -1; extra = ft->extra;
        } else if (!strcmp(kind, "gpu")) {
            if (S.ngpu >= MAX_GPUS) return -1;
            g = &S.gpu[S.ngpu++]; extra = g->extra; g->persistence = 1;
        } else {
            if (!g) { warn("%s record before any gpu record", kind); return -1; }
            if (!strcmp(kind, "gip")) { if (g->ngip >= MAX_GIP) return -1; gp = &g->gip[g->ngip++]; extra = gp->extra; }
            else if (!strcmp(kind, "cip")) { if (g->ncip >= MAX_CIP) return -1; cp = &g->cip[g->ncip++]; extra = cp->extra; }
            else if (!strcmp(kind, "gi")) { if (g->ngi >= MAX_GI) return -1; gi = &g->gi[g->ngi++]; extra = gi->extra; }
            else if (!strcmp(kind, "ci")) { if (g->nci >= MAX_CI) return -1; ci = &g->ci[g->nci++]; extra = ci->extra; }
            else if (!strcmp(kind, "proc")) { if (g->nproc >= MAX_PROC) return -1; pr = &g->proc[g->nproc++]; pr->gi = pr->ci = -1; extra = pr->extra; }
            else { warn("unknown record kind %s", kind); return -1; }
        }
        char *tok;
        while ((tok = strtok_r(NULL, " \t", &save))) {
            char *eq = strchr(tok, '=');
            if (!eq) continue;
            char key[64], val[STR * 4];
            size_t kl = (size_t)(eq - tok);
            if (kl >= sizeof key) continue;
            memcpy(key, tok, kl); key[kl] = 0;
            pct_decode(val, sizeof val, eq + 1);
            int known = 1;
            if (!strcmp(kind, "gpusim")) { if (KEY("version") && IV != 1) { warn("state format %s unsupported", val); return -1; } }
            else if (!strcmp(kind, "host")) {
                if (KEY("driver")) snprintf(S.driver, STR, "%s", val);
                else if (KEY("nvml")) snprintf(S.nvml, STR, "%s", val);
                else if (KEY("cuda")) S.cuda = (int)IV;
                else if (KEY("boot")) S.boot = (int)IV;
                else known = 0;
            } else if (ft) {
                if (KEY("gpu")) ft->gpu = (int)IV; else if (KEY("value")) ft->value = (int)IV;
                else if (KEY("times")) ft->times = (int)IV;
                else if (KEY("name")) snprintf(ft->name, STR, "%s", val); else known = 0;
            } else if (gp) {
                if (KEY("gpu")) ;
                else if (KEY("index")) gp->index = (int)IV; else if (KEY("id")) gp->id = (int)IV;
                else if (KEY("name")) snprintf(gp->name, STR, "%s", val);
                else if (KEY("slices")) gp->slices = (int)IV; else if (KEY("instances")) gp->instances = (int)IV;
                else if (KEY("sms")) gp->sms = (int)IV; else if (KEY("ce")) gp->ce = (int)IV;
                else if (KEY("dec")) gp->dec = (int)IV; else if (KEY("enc")) gp->enc = (int)IV;
                else if (KEY("jpeg")) gp->jpeg = (int)IV; else if (KEY("ofa")) gp->ofa = (int)IV;
                else if (KEY("mem_mb")) gp->mem_mb = (unsigned long long)IV; else if (KEY("p2p")) gp->p2p = (int)IV;
                else if (KEY("placements")) parse_placements(val, gp->plc, &gp->nplc);
                else known = 0;
            } else if (cp) {
                if (KEY("gpu")) ;
                else if (KEY("gip")) cp->gip = (int)IV; else if (KEY("index")) cp->index = (int)IV;
                else if (KEY("id")) cp->id = (int)IV; else if (KEY("name")) snprintf(cp->name, STR, "%s", val);
                else if (KEY("slices")) cp->slices = (int)IV; else if (KEY("instances")) cp->instances = (int)IV;
                else if (KEY("sms")) cp->sms = (int)IV;
                else if (KEY("placements")) parse_placements(val, cp->plc, &cp->nplc);
                else known = 0;
            } else if (gi) {
                if (KEY("gpu")) ; else if (KEY("id")) gi->id = (int)IV; else if (KEY("profile")) gi->profile = (int)IV;
                else if (KEY("start")) gi->start = (int)IV; else if (KEY("size")) gi->size = (int)IV; else known = 0;
            } else if (ci) {
                if (KEY("gpu")) ; else if (KEY("gi")) ci->gi = (int)IV; else if (KEY("id")) ci->id = (int)IV;
                else if (KEY("profile")) ci->profile = (int)IV; else if (KEY("start")) ci->start = (int)IV;
                else if (KEY("size")) ci->size = (int)IV; else if (KEY("uuid")) snprintf(ci->uuid, STR, "%s", val);
                else known = 0;
            } else if (pr) {
                if (KEY("gpu")) ; else if (KEY("pid")) pr->pid = (unsigned)IV;
                else if (KEY("used_mb")) pr->used_mb = (unsigned long long)IV;
                else if (KEY("gi")) pr->gi = (int)IV; else if (KEY("ci")) pr->ci = (int)IV;
                else if (KEY("name")) snprintf(pr->name, STR, "%s", val); else known = 0;
            } else if (g && !strcmp(kind, "gpu")) {
                if (KEY("index")) g->index = (int)IV; else if (KEY("bus")) g->bus = (int)IV;
                else if (KEY("model")) snprintf(g->model, STR, "%s", val);
                else if (KEY("name")) snprintf(g->name, STR, "%s", val);
                else if (KEY("uuid")) snprintf(g->uuid, STR, "%s", val);
                else if (KEY("serial")) snprintf(g->serial, STR, "%s", val);
                else if (KEY("vbios")) snprintf(g->vbios, STR, "%s", val);
                else if (KEY("board")) snprintf(g->board, STR, "%s", val);
                else if (KEY("pci_device_id")) g->pci_device_id = (unsigned)strtoul(val, NULL, 0);
                else if (KEY("pci_subsystem_id")) g->pci_subsystem_id = (unsigned)strtoul(val, NULL, 0);
                else if (KEY("mem_total")) g->mem_total = strtoull(val, NULL, 0);
                else if (KEY("mem_reserved_mb")) g->mem_reserved_mb = strtoull(val, NULL, 0);
                else if (KEY("mig_capable")) g->mig_capable = (int)IV;
                else if (KEY("mig_current")) g->mig_current = (int)IV;
                else if (KEY("mig_pending")) g->mig_pending = (int)IV;
                else if (KEY("mem_slices")) g->mem_slices = (int)IV;
                else if (KEY("compute_slices")) g->compute_slices = (int)IV;
                else if (KEY("max_mig")) g->max_mig = (int)IV; else if (KEY("arch")) g->arch = (int)IV;
                else if (KEY("cc_major")) g->cc_major = (int)IV; else if (KEY("cc_minor")) g->cc_minor = (int)IV;
                else if (KEY("sms")) g->sms = (int)IV; else if (KEY("persistence")) g->persistence = (int)IV;
                else known = 0;
            }
            if (!known && extra) add_extra(extra, tok);
        }
    }
    if (!header) { warn("%s is not a gpusim state file", state_path); return -1; }
    for (int i = 0; i < S.ngpu; i++) {
        gpu_t *g = &S.gpu[i];
        if (g->index != i) { warn("GPU records out of order at %d", i); return -1; }
        /* handle tables are indexed by GI id and CI id */
        for (int j = 0; j < g->ngi; j++)
            if (g->gi[j].id < 0 || g->gi[j].id >= MAX_GI) { warn("GPU %d: GI id %d out of range", i, g->gi[j].id); return -1; }
        for (int j = 0; j < g->nci; j++)
            if (g->ci[j].gi < 0 || g->ci[j].gi >= MAX_GI || g->ci[j].id < 0 || g->ci[j].id >= MAX_CI_PER_GI) {
                warn("GPU %d: CI %d/%d out of range", i, g->ci[j].gi, g->ci[j].id); return -1;
            }
    }
    return 0;
}

static int write_state(void) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", state_path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) { warn("cannot write %s: %s", tmp, strerror(errno)); return -1; }
    fprintf(f, "# simulated GPU host; change it only through tests/testbed/gpusim/hoststate.py or NVML\n");
    fprintf(f, "gpusim version=1\nhost driver="); pct_encode(f, S.driver);
    fprintf(f, " nvml="); pct_encode(f, S.nvml);
    fprintf(f, " cuda=%d boot=%d%s\n", S.cuda, S.boot, S.host_extra);
    for (int i = 0; i < S.nfault; i++) {
        fprintf(f, "fault gpu=%d name=", S.fault[i].gpu); pct_encode(f, S.fault[i].name);
        fprintf(f, " value=%d", S.fault[i].value);
        if (S.fault[i].times >= 0) fprintf(f, " times=%d", S.fault[i].times);
        fprintf(f, "%s\n", S.fault[i].extra);
    }
    for (int i = 0; i < S.ngpu; i++) {
        gpu_t *g = &S.gpu[i];
        fprintf(f, "gpu index=%d model=", g->index); pct_encode(f, g->model);
        fprintf(f, " name="); pct_encode(f, g->name);
        fprintf(f, " uuid="); pct_encode(f, g->uuid);
        fprintf(f, " serial="); pct_encode(f, g->serial);
        fprintf(f, " bus=%d pci_device_id=0x%08X pci_subsystem_id=0x%08X mem_total=%llu mem_reserved_mb=%llu"
                   " mig_capable=%d mig_current=%d mig_pending=%d mem_slices=%d compute_slices=%d max_mig=%d"
                   " arch=%d cc_major=%d cc_minor=%d sms=%d persistence=%d vbios=",
                g->bus, g->pci_device_id, g->pci_subsystem_id, g->mem_total, g->mem_reserved_mb, g->mig_capable,
                g->mig_current, g->mig_pending, g->mem_slices, g->compute_slices, g->max_mig, g->arch, g->cc_major,
                g->cc_minor, g->sms, g->persistence);
        pct_encode(f, g->vbios); fprintf(f, " board="); pct_encode(f, g->board);
        fprintf(f, "%s\n", g->extra);
        for (int j = 0; j < g->ngip; j++) {
            gip_t *p = &g->gip[j];
            fprintf(f, "gip gpu=%d index=%d id=%d name=", i, p->index, p->id); pct_encode(f, p->name);
            fprintf(f, " slices=%d instances=%d sms=%d ce=%d dec=%d enc=%d jpeg=%d ofa=%d mem_mb=%llu p2p=%d placements=",
                    p->slices, p->instances, p->sms, p->ce, p->dec, p->enc, p->jpeg, p->ofa, p->mem_mb, p->p2p);
            for (int k = 0; k < p->nplc; k++) fprintf(f, "%s%d:%d", k ? "," : "", p->plc[k].start, p->plc[k].size);
            fprintf(f, "%s\n", p->extra);
        }
        for (int j = 0; j < g->ncip; j++) {
            cip_t *p = &g->cip[j];
            fprintf(f, "cip gpu=%d gip=%d index=%d id=%d name=", i, p->gip, p->index, p->id); pct_encode(f, p->name);
            fprintf(f, " slices=%d instances=%d sms=%d placements=", p->slices, p->instances, p->sms);
            for (int k = 0; k < p->nplc; k++) fprintf(f, "%s%d:%d", k ? "," : "", p->plc[k].start, p->plc[k].size);
            fprintf(f, "%s\n", p->extra);
        }
        for (int j = 0; j < g->ngi; j++)
            fprintf(f, "gi gpu=%d id=%d profile=%d start=%d size=%d%s\n", i, g->gi[j].id, g->gi[j].profile,
                    g->gi[j].start, g->gi[j].size, g->gi[j].extra);
        for (int j = 0; j < g->nci; j++) {
            ci_t *c = &g->ci[j];
            fprintf(f, "ci gpu=%d gi=%d id=%d profile=%d start=%d size=%d uuid=", i, c->gi, c->id, c->profile,
                    c->start, c->size);
            pct_encode(f, c->uuid); fprintf(f, "%s\n", c->extra);
        }
        for (int j = 0; j < g->nproc; j++) {
            proc_t *p = &g->proc[j];
            fprintf(f, "proc gpu=%d pid=%u used_mb=%llu gi=%d ci=%d name=", i, p->pid, p->used_mb, p->gi, p->ci);
            pct_encode(f, p->name); fprintf(f, "%s\n", p->extra);
        }
    }
    if (fclose(f) != 0 || rename(tmp, state_path) != 0) {
        warn("cannot replace %s: %s", state_path, strerror(errno)); unlink(tmp); return -1;
    }
    stat(state_path, &loaded_stat);
    return 0;
}

static int lock_state(int op) {
    char lp[4200];
    snprintf(lp, sizeof lp, "%s.lock", state_path);
    lock_fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0) { warn("cannot open %s: %s", lp, strerror(errno)); return -1; }
    while (flock(lock_fd, op) != 0) if (errno != EINTR) { close(lock_fd); lock_fd = -1; return -1; }
    return 0;
}
static void unlock_state(void) {
    if (lock_fd >= 0) { flock(lock_fd, LOCK_UN); close(lock_fd); lock_fd = -1; }
}

/* Read the file (caller holds the lock); force=0 skips it when unchanged on disk. */
static nvmlReturn_t read_state(int force) {
    struct stat st;
    if (stat(state_path, &st) != 0) { warn("state %s: %s", state_path, strerror(errno)); return NVML_ERROR_DRIVER_NOT_LOADED; }
    if (!force && loaded && st.st_ino == loaded_stat.st_ino && st.st_size == loaded_stat.st_size &&
        st.st_mtim.tv_sec == loaded_stat.st_mtim.tv_sec && st.st_mtim.tv_nsec == loaded_stat.st_mtim.tv_nsec)
        return NVML_SUCCESS;
    FILE *f = fopen(state_path, "r");
    if (!f) return NVML_ERROR_DRIVER_NOT_LOADED;
    size_t cap = (size_t)st.st_size + 1;
    char *text = malloc(cap);
    if (!text) { fclose(f); return NVML_ERROR_MEMORY; }
    size_t n = fread(text, 1, cap - 1, f);
    text[n] = 0;
    fclose(f);
    int rc = parse_state(text);
    free(text);
    if (rc != 0) { loaded = 0; return NVML_ERROR_UNKNOWN; }
    loaded_stat = st; loaded = 1;
    return NVML_SUCCESS;
}

static nvmlReturn_t refresh(void) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (lock_state(LOCK_SH) != 0) return NVML_ERROR_UNKNOWN;
    nvmlReturn_t rc = read_state(0);
    unlock_state();
    return rc;
}

/* Mutations: exclusive lock, fresh read, change, commit (write) or abort. */
static nvmlReturn_t begin_mutation(void) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (lock_state(LOCK_EX) != 0) return NVML_ERROR_UNKNOWN;
    nvmlReturn_t rc = read_state(1);
    if (rc != NVML_SUCCESS) unlock_state();
    return rc;
}
static nvmlReturn_t end_mutation(nvmlReturn_t rc) {
    if (rc == NVML_SUCCESS && write_state() != 0) rc = NVML_ERROR_UNKNOWN;
    if (rc != NVML_SUCCESS) loaded = 0; /* re-read next time: drop any partial change */
    unlock_state();
    return rc;
}

static int fault_on(int gpu, const char *name) {
    for (int i = 0; i < S.nfault; i++)
        if (S.fault[i].value && (S.fault[i].gpu == -1 || S.fault[i].gpu == gpu) && !strcmp(S.fault[i].name, name))
            return 1;
    return 0;
}

/* Inside a mutation: whether fault `name` fires for GPU `gpu` now. A fault with `times` counts down and goes off
 * (value 0) at 0; then *changed is set and the caller must write the state even when its call fails. */
static int fault_fires(int gpu, const char *name, int *changed) {
    for (int i = 0; i < S.nfault; i++) {
        fault_t *f = &S.fault[i];
        if (!f->value || (f->gpu != -1 && f->gpu != gpu) || strcmp(f->name, name)) continue;
        if (f->times > 0 && --f->times == 0) { f->value = 0; *changed = 1; }
        return 1;
    }
    return 0;
}

/* Fault mig_change_hangs: a MIG change (nvmlDeviceSetMigMode, GPU-instance creation) never returns, as when the
 * driver stops answering; the caller holds the state's lock, which is given back first (other clients, such as
 * nvidia-smi or a monitoring agent, still read the GPU). Only killing the process ends it. */
static void hang_if_faulted(int gpu) {
    int changed = 0;
    if (!fault_fires(gpu, "mig_change_hangs", &changed)) return;
    if (changed) write_state();
    loaded = 0;
    unlock_state();
    for (;;) pause();
}

/* Fault mig_change_slow (value: milliseconds): the first MIG change a process makes (nvmlDeviceSetMigMode,
 * GPU-instance creation) takes that much longer, as on a loaded host; once per process, as one mig-parted apply makes
 * many. The state's lock is given back meanwhile and the state read again after; on failure to lock again the call
 * fails with NVML_ERROR_UNKNOWN and the lock is not held. */
static int slowed_once = 0;
static nvmlReturn_t slow_if_faulted(int gpu) {
    long ms = 0;
    for (int i = 0; i < S.nfault && !slowed_once; i++) {
        fault_t *f = &S.fault[i];
        if (f->value > 0 && (f->gpu == -1 || f->gpu == gpu) && !strcmp(f->name, "mig_change_slow")) ms = f->value;
    }
    if (ms <= 0) return NVML_SUCCESS;
    slowed_once = 1;
    loaded = 0;
    unlock_state();
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    if (lock_state(LOCK_EX) != 0) return NVML_ERROR_UNKNOWN;
    nvmlReturn_t rc = read_state(1);
    if (rc != NVML_SUCCESS) { unlock_state(); return rc; }
    return NVML_SUCCESS;
}

/* ---- lookups ---- */
static gip_t *gip_by_index(gpu_t *g, int index) {
    for (int i = 0; i < g->ngip; i++) if (g->gip[i].index == index) return &g->gip[i];
    return NULL;
}
static gip_t *gip_by_id(gpu_t *g, int id) {
    for (int i = 0; i < g->ngip; i++) if (g->gip[i].id == id) return &g->gip[i];
    return NULL;
}
static cip_t *cip_find(gpu_t *g, int gip_id, int by_index, int key) {
    for (int i = 0; i < g->ncip; i++)
        if (g->cip[i].gip == gip_id && (by_index ? g->cip[i].index : g->cip[i].id) == key) return &g->cip[i];
    return NULL;
}
static gi_t *gi_by_id(gpu_t *g, int id) {
    for (int i = 0; i < g->ngi; i++) if (g->gi[i].id == id) return &g->gi[i];
    return NULL;
}
static ci_t *ci_by_id(gpu_t *g, int gi, int id) {
    for (int i = 0; i < g->nci; i++) if (g->ci[i].gi == gi && g->ci[i].id == id) return &g->ci[i];
    return NULL;
}

static int valid_handle(const struct sim_handle *h, int kind) {
    return h && h->magic == HANDLE_MAGIC && h->kind == kind && h->gpu >= 0 && h->gpu < S.ngpu;
}
/* Full GPU or MIG device handle -> GPU (and, for MIG, its GI/CI). */
static nvmlReturn_t resolve_device(nvmlDevice_t d, gpu_t **g, gi_t **gi, ci_t **ci) {
    if (gi) *gi = NULL;
    if (ci) *ci = NULL;
    if (valid_handle(d, H_DEVICE)) { *g = &S.gpu[d->gpu]; return NVML_SUCCESS; }
    if (valid_handle(d, H_MIG)) {
        *g = &S.gpu[d->gpu];
        gi_t *x = gi_by_id(*g, d->gi);
        ci_t *y = x ? ci_by_id(*g, d->gi, d->ci) : NULL;
        if (!y || !(*g)->mig_current) return NVML_ERROR_INVALID_ARGUMENT; /* MIG device gone */
        if (gi) *gi = x;
        if (ci) *ci = y;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_INVALID_ARGUMENT;
}
static nvmlReturn_t resolve_gpu_only(nvmlDevice_t d, gpu_t **g) {
    if (!valid_handle(d, H_DEVICE)) return NVML_ERROR_INVALID_ARGUMENT;
    *g = &S.gpu[d->gpu];
    return NVML_SUCCESS;
}
static nvmlReturn_t resolve_gi(nvmlGpuInstance_t h, gpu_t **g, gi_t **gi) {
    if (!valid_handle(h, H_GI)) return NVML_ERROR_INVALID_ARGUMENT;
    *g = &S.gpu[h->gpu];
    *gi = gi_by_id(*g, h->gi);
    return *gi && (*g)->mig_current ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* One API call at a time per process (pynvml may be used from threads): a recursive mutex held for the
 * whole call, released on every return path by the cleanup attribute. */
static pthread_mutex_t api_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static void api_unlock(int *unused) { (void)unused; pthread_mutex_unlock(&api_mutex); }
#define API_GUARD int api_guard_ __attribute__((cleanup(api_unlock), unused)) = pthread_mutex_lock(&api_mutex)
#define ENTER() API_GUARD; do { nvmlReturn_t _r = refresh(); if (_r != NVML_SUCCESS) return _r; } while (0)
#define TRY(x) do { nvmlReturn_t _r = (x); if (_r != NVML_SUCCESS) return _r; } while (0)

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ---- init / system ---- */
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    API_GUARD;
    (void)flags;
    const char *p = getenv("GPUFLEET_SIM_NVML_STATE");
    if (!p || !*p) { warn("GPUFLEET_SIM_NVML_STATE is not set: no simulated driver"); return NVML_ERROR_DRIVER_NOT_LOADED; }
    snprintf(state_path, sizeof state_path, "%s", p);
    if (lock_state(LOCK_SH) != 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    nvmlReturn_t rc = read_state(1); /* always a fresh read at init */
    unlock_state();
    if (rc != NVML_SUCCESS) return rc;
    init_count++;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlShutdown(void) {
    API_GUARD;
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    init_count--;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) { ENTER(); return copy_str(v, len, S.driver); }
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len) { ENTER(); return copy_str(v, len, S.nvml); }
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    ENTER();
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = S.cuda;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

/* Name of a process using a simulated GPU (the state's proc name); NOT_FOUND for other pids. */
EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    ENTER();
    for (int i = 0; i < S.ngpu; i++)
        for (int j = 0; j < S.gpu[i].nproc; j++)
            if (S.gpu[i].proc[j].pid == pid) {
                if (!name || !length) return NVML_ERROR_INVALID_ARGUMENT;
                snprintf(name, length, "%s", S.gpu[i].proc[j].name); /* truncates like NVML */
                return NVML_SUCCESS;
            }
    return NVML_ERROR_NOT_FOUND;
}

/* ---- device discovery and identity ---- */
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER();
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)S.ngpu;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *d) {
    ENTER();
    if (!d || index >= (unsigned)S.ngpu) return NVML_ERROR_INVALID_ARGUMENT;
    *d = device_handle((int)index);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *d) {
    return nvmlDeviceGetHandleByIndex_v2(index, d);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d) {
    ENTER();
    if (!uuid || !d) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < S.ngpu; i++) {
        gpu_t *g = &S.gpu[i];
        if (!strcmp(g->uuid, uuid)) { *d = device_handle(i); return NVML_SUCCESS; }
        for (int j = 0; g->mig_current && j < g->nci; j++)
            if (!strcmp(g->ci[j].uuid, uuid)) { *d = mig_handle(i, g->ci[j].gi, g->ci[j].id); return NVML_SUCCESS; }
    }
    return NVML_ERROR_NOT_FOUND;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *d) {
    ENTER();
    if (!serial || !d) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < S.ngpu; i++)
        if (!strcmp(S.gpu[i].serial, serial)) { *d = device_handle(i); return NVML_SUCCESS; }
    return NVML_ERROR_NOT_FOUND;
}
static int parse_bus_id(const char *s, unsigned *dom, unsigned *bus, unsigned *dev) {
    unsigned fn = 0;
    if (sscanf(s, "%x:%x:%x.%x", dom, bus, dev, &fn) == 4) return 0;
    *dom = 0;
    if (sscanf(s, "%x:%x.%x", bus, dev, &fn) == 3) return 0;
    return -1;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *busId, nvmlDevice_t *d) {
    ENTER();
    unsigned dom, bus, dev;
    if (!busId || !d || parse_bus_id(busId, &dom, &bus, &dev) != 0) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < S.ngpu; i++)
        if (dom == 0 && bus == (unsigned)S.gpu[i].bus && dev == 0) { *d = device_handle(i); return NVML_SUCCESS; }
    return NVML_ERROR_NOT_FOUND;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *busId, nvmlDevice_t *d) {
    return nvmlDeviceGetHandleByPciBusId_v2(busId, d);
}

static const cip_t *ci_profile_of(gpu_t *g, gi_t *gi, ci_t *ci) {
    return cip_find(g, gi->profile, 0, ci->profile);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len) {
    ENTER();
    gpu_t *g; gi_t *gi; ci_t *ci;
    TRY(resolve_device(d, &g, &gi, &ci));
    if (!ci) return copy_str(name, len, g->name);
    const cip_t *cp = ci_profile_of(g, gi, ci);
    char buf[2 * STR + 8];
    /* "NVIDIA A100-SXM4-40GB MIG 1g.5gb": GPU name + the compute-instance profile name. */
    snprintf(buf, sizeof buf, "%s %s", g->name, cp ? cp->name : "MIG");
    return copy_str(name, len, buf);
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len) {
    ENTER();
    gpu_t *g; ci_t *ci;
    TRY(resolve_device(d, &g, NULL, &ci));
    return copy_str(uuid, len, ci ? ci->uuid : g->uuid);
}
EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *serial, unsigned int len) {
    ENTER();
    gpu_t *g;
    if (valid_handle(d, H_MIG)) return NVML_ERROR_NOT_SUPPORTED;
    TRY(resolve_gpu_only(d, &g));
    return copy_str(serial, len, g->serial);
}
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    ENTER();
    gpu_t *g;
    TRY(resolve_gpu_only(d, &g));
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)g->index;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) {
    ENTER();
    gpu_t *g;
    TRY(resolve_gpu_only(d, &g));
    if (!minor) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = (unsigned)g->index;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    ENTER();
    gpu_t *g;
    TRY(resolve_device(d, &g, NULL, NULL));
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    pci->domain = 0; pci->bus = (unsigned)g->bus; pci->device = 0;
    pci->pciDeviceId = g->pci_device_id; pci->pciSubSystemId = g->pci_subsystem_id;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", g->bus);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", g->bus);
    return NVML_SUCCESS;
}

static unsigned long long proc_mem(gpu_t *g, int gi, int ci) {
    unsigned long long sum = 0;
    for (int i = 0; i < g->nproc; i++)
        if (gi < 0 || (g->proc[i].gi == gi && (ci < 0 || g->proc[i].ci == ci))) sum += g->proc[i].used_mb * MIB;
    return sum;
}
static void memory_of(gpu_t *g, gi_t *gi, unsigned long long *total, unsigned long long *reserved,
                      unsigned long long *used) {
    if (gi) {
        gip_t *p = gip_by_id(g, gi->profile);
        *total = p ? p->mem_mb * MIB : 0; *reserved = 0; *used = proc_mem(g, gi->id, -1);
    } else {
        *total = g->mem_total; *reserved = g->mem_reserved_mb * MIB; *used = proc_mem(g, -1, -1);
    }
    if (*used + *reserved > *total) *used = *total - *reserved;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    ENTER();
    gpu_t *g; gi_t *gi;
    TRY(resolve_device(d, &g, &gi, NULL));
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long total, reserved, used;
    memory_of(g, gi, &total, &reserved, &used);
    m->total = total; m->used = used + reserved; m->free = total - used - reserved;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    ENTER();
    gpu_t *g; gi_t *gi;
    TRY(resolve_device(d, &g, &gi, NULL));
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long total, reserved, used;
    memory_of(g, gi, &total, &reserved, &used);
    m->total = total; m->reserved = reserved; m->used = used; m->free = total - used - reserved;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned int *arch) {
    ENTER();
    gpu_t *g;
    TRY(resolve_device(d, &g, NULL, NULL));
    if (!arch) return NVML_ERROR_INVALID_ARGUMENT;
    *arch = (unsigned)g->arch;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    ENTER();
    gpu_t *g;
    TRY(resolve_device(d, &g, NULL, NULL));
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = g->cc_major; *minor = g->cc_minor;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, unsigned int *mode) {
    ENTER();
    gpu_t *g;
    TRY(resolve_gpu_only(d, &g));
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = (unsigned)g->persistence;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t d, char *v, unsigned int len) {
    ENTER();
    gpu_t *g;
    TRY(resolve_gpu_only(d, &g));
    return copy_str(v, len, g->vbios);
}
EXPORT nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t d, char *v, unsigned int len) {
    ENTER();
    gpu_t *g;
    TRY(resolve_gpu_only(d, &g));
    return copy_str(v, len, g->board);
}

/* ---- processes ---- */
static nvmlReturn_t list_processes(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos) {
    ENTER();
    gpu_t *g; gi_t *gi; ci_t *ci;
    TRY(resolve_device(d, &g, &gi, &ci));
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (int i = 0; i < g->nproc; i++)
        if (!ci || (g->proc[i].gi == ci->gi && g->proc[i].ci == ci->id)) n++;
    if (*count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    if (n && !infos) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned k = 0;
    for (int i = 0; i < g->nproc; i++) {
        proc_t *p = &g->proc[i];
        if (ci && !(p->gi == ci->gi && p->ci == ci->id)) continue;
        infos[k].pid = p->pid; infos[k].usedGpuMemory = p->used_mb * MIB;
        infos[k].gpuInstanceId = p->gi < 0 ? NVML_INVALID_ID : (unsigned)p->gi;
        infos[k].computeInstanceId = p->ci < 0 ? NVML_INVALID_ID : (unsigned)p->ci;
        k++;
    }
    *count = n;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *p) {
    return list_processes(d, c, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *p) {
    return list_processes(d, c, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *p) {
    ENTER();
    gpu_t *g;
    (void)p;
    TRY(resolve_device(d, &g, NULL, NULL));
    if (!c) return NVML_ERROR_INVALID_ARGUMENT;
    *c = 0; /* compute-only data-centre GPUs: no graphics clients */
    return NVML_SUCCESS;
}

/* ---- MIG mode ---- */
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    ENTER();
    gpu_t *g;
    TRY(resolve_gpu_only(d, &g));
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    *current = (unsigned)g->mig_current; *pending = (unsigned)g->mig_pending;
    return NVML_SUCCESS;
}

static void clear_mig_devices(gpu_t *g) { g->ngi = 0; g->nci = 0; }

EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t d, unsigned int mode, nvmlReturn_t *activationStatus) {
    API_GUARD;
    TRY(begin_mutation());
    gpu_t *g;
    nvmlReturn_t rc = resolve_gpu_only(d, &g);
    if (rc == NVML_SUCCESS && (rc = slow_if_faulted(g->index)) != NVML_SUCCESS) return rc;
    if (rc == NVML_SUCCESS) hang_if_faulted(g->index);
    if (rc == NVML_SUCCESS && (!activationStatus || mode > 1)) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && !g->mig_capable) rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS && fault_on(g->index, "no_permission")) rc = NVML_ERROR_NO_PERMISSION;
    /* MIG cannot be switched off under existing GPU instances: they must be destroyed first. */
    if (rc == NVML_SUCCESS && mode == 0 && g->ngi > 0) rc = NVML_ERROR_IN_USE;
    if (rc != NVML_SUCCESS) return end_mutation(rc);
    g->mig_pending = (int)mode;
    if (g->mig_pending == g->mig_current) *activationStatus = NVML_SUCCESS;
    else if (g->nproc > 0) *activationStatus = NVML_ERROR_IN_USE;                 /* stays pending */
    else if (fault_on(g->index, "reset_unsupported")) *activationStatus = NVML_ERROR_RESET_REQUIRED; /* VM: reboot */
    else if (fault_on(g->index, "mig_mode_needs_reset")) *activationStatus = NVML_ERROR_RESET_REQUIRED; /* nvidia-smi -r */
    else { g->mig_current = g->mig_pending; clear_mig_devices(g); *activationStatus = NVML_SUCCESS; }
    return end_mutation(NVML_SUCCESS);
}

/* ---- GPU instance profiles ---- */
static nvmlReturn_t profile_table_usable(gpu_t *g) {
    if (!g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    /* Older driver branches report no profile table until MIG is on (fault no_profiles_when_mig_off). */
    if (!g->mig_current && fault_on(g->index, "no_profiles_when_mig_off")) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}
/* Fault wrong_instance_counts: NVML misreports the A30's profile instance counts ("NVML has a bug that
 * reports incorrect profiles for this GPU", NVIDIA/mig-parted pkg/mig/discovery/discovery.go, which
 * hard-codes that table). Which counts a real A30 gets wrong is not published; here each profile's count
 * is reported as its number of possible placements (wrong for the +me profiles). Only what is reported
 * changes: creating instances still obeys the true limits. */
static unsigned reported_instances(gpu_t *g, gip_t *p) {
    if (fault_on(g->index, "wrong_instance_counts") && p->nplc > 0) return (unsigned)p->nplc;
    return (unsigned)p->instances;
}
static nvmlReturn_t gip_for_index(nvmlDevice_t d, unsigned int profile, gpu_t **g, gip_t **p) {
    TRY(resolve_gpu_only(d, g));
    if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    TRY(profile_table_usable(*g));
    *p = gip_by_index(*g, (int)profile);
    return *p ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t d, unsigned int profile,
                                                         nvmlGpuInstanceProfileInfo_t *info) {
    ENTER();
    gpu_t *g; gip_t *p;
    TRY(gip_for_index(d, profile, &g, &p));
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    info->id = (unsigned)p->id; info->isP2pSupported = (unsigned)p->p2p; info->sliceCount = (unsigned)p->slices;
    info->instanceCount = reported_instances(g, p); info->multiprocessorCount = (unsigned)p->sms;
    info->copyEngineCount = (unsigned)p->ce; info->decoderCount = (unsigned)p->dec;
    info->encoderCount = (unsigned)p->enc; info->jpegCount = (unsigned)p->jpeg; info->ofaCount = (unsigned)p->ofa;
    info->memorySizeMB = p->mem_mb;
    return NVML_SUCCESS;
}
static nvmlReturn_t fill_gip_v(gpu_t *g, gip_t *p, void *out) {
    unsigned version = *(unsigned *)out;
    if (version == 0 || version == nvmlGpuInstanceProfileInfo_v2) {
        nvmlGpuInstanceProfileInfo_v2_t *i = out;
        /* pynvml passes v2 and the R580 driver hands the struct back with version 0 (ref h200-nvml-reading.json). */
        i->version = 0;
        i->id = (unsigned)p->id; i->isP2pSupported = (unsigned)p->p2p; i->sliceCount = (unsigned)p->slices;
        i->instanceCount = reported_instances(g, p); i->multiprocessorCount = (unsigned)p->sms;
        i->copyEngineCount = (unsigned)p->ce; i->decoderCount = (unsigned)p->dec; i->encoderCount = (unsigned)p->enc;
        i->jpegCount = (unsigned)p->jpeg; i->ofaCount = (unsigned)p->ofa; i->memorySizeMB = p->mem_mb;
        snprintf(i->name, sizeof i->name, "%s", p->name);
        return NVML_SUCCESS;
    }
    if (version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *i = out;
        i->id = (unsigned)p->id; i->sliceCount = (unsigned)p->slices; i->instanceCount = reported_instances(g, p);
        i->multiprocessorCount = (unsigned)p->sms; i->copyEngineCount = (unsigned)p->ce;
        i->decoderCount = (unsigned)p->dec; i->encoderCount = (unsigned)p->enc; i->jpegCount = (unsigned)p->jpeg;
        i->ofaCount = (unsigned)p->ofa; i->memorySizeMB = p->mem_mb; i->capabilities = p->p2p ? 1u : 0u;
        snprintf(i->name, sizeof i->name, "%s", p->name);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t d, unsigned int profile, void *info) {
    ENTER();
    gpu_t *g; gip_t *p;
    TRY(gip_for_index(d, profile, &g, &p));
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    return fill_gip_v(g, p, info);
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t d, unsigned int profileId, void *info) {
    ENTER();
    gpu_t *g;
    TRY(resolve_gpu_only(d, &g));
    TRY(profile_table_usable(g));
    gip_t *p = gip_by_id(g, (int)profileId);
    if (!p) return NVML_ERROR_INVALID_ARGUMENT;
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    return fill_gip_v(g, p, info);
}

static nvmlReturn_t gip_for_id(nvmlDevice_t d, unsigned int profileId, gpu_t **g, gip_t **p) {
    TRY(resolve_gpu_only(d, g));
    TRY(profile_table_usable(*g));
    *p = gip_by_id(*g, (int)profileId);
    return *p ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}
static unsigned mask_of(int start, int size) { return ((1u << size) - 1u) << start; }
static unsigned gi_memory_mask(gpu_t *g) {
    unsigned m = 0;
    for (int i = 0; i < g->ngi; i++) m |= mask_of(g->gi[i].start, g->gi[i].size);
    return m;
}
static int gi_compute_used(gpu_t *g) {
    int used = 0;
    for (int i = 0; i < g->ngi; i++) { gip_t *p = gip_by_id(g, g->gi[i].profile); used += p ? p->slices : 0; }
    return used;
}
static int gi_count_of(gpu_t *g, int profile_id) {
    int n = 0;
    for (int i = 0; i < g->ngi; i++) n += g->gi[i].profile == profile_id;
    return n;
}
/* Placement a new GI of profile p would get: highest free start (see header). -1: none. */
static int choose_gi_placement(gpu_t *g, gip_t *p, unsigned mask, int used_compute, int existing) {
    if (existing >= p->instances || used_compute + p->slices > g->compute_slices) return -1;
    int best = -1;
    for (int k = 0; k < p->nplc; k++)
        if (!(mask & mask_of(p->plc[k].start, p->plc[k].size)) && (best < 0 || p->plc[k].start > p->plc[best].start))
            best = k;
    return best;
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t d, unsigned int profileId,
                                                                  nvmlGpuInstancePlacement_t *placements,
                                                                  unsigned int *count) {
    ENTER();
    gpu_t *g; gip_t *p;
    TRY(gip_for_id(d, profileId, &g, &p));
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!placements) { *count = (unsigned)p->nplc; return NVML_SUCCESS; }
    if (*count < (unsigned)p->nplc) { *count = (unsigned)p->nplc; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (int k = 0; k < p->nplc; k++) {
        placements[k].start = (unsigned)p->plc[k].start; placements[k].size = (unsigned)p->plc[k].size;
    }
    *count = (unsigned)p->nplc;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t d, unsigned int profileId,
                                                              unsigned int *count) {
    ENTER();
    gpu_t *g; gip_t *p;
    TRY(gip_for_id(d, profileId, &g, &p));
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned mask = gi_memory_mask(g);
    int used = gi_compute_used(g), existing = gi_count_of(g, p->id), n = 0, k;
    while ((k = choose_gi_placement(g, p, mask, used, existing)) >= 0) {
        mask |= mask_of(p->plc[k].start, p->plc[k].size); used += p->slices; existing++; n++;
    }
    *count = (unsigned)n;
    return NVML_SUCCESS;
}

static nvmlReturn_t create_gi(nvmlDevice_t d, unsigned int profileId, const nvmlGpuInstancePlacement_t *want,
                              nvmlGpuInstance_t *out) {
    API_GUARD;
    TRY(begin_mutation());
    gpu_t *g; gip_t *p = NULL;
    nvmlReturn_t rc = resolve_gpu_only(d, &g);
    if (rc == NVML_SUCCESS && (rc = slow_if_faulted(g->index)) != NVML_SUCCESS) return rc;
    if (rc == NVML_SUCCESS && !out) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && (!g->mig_capable || !g->mig_current)) rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS && fault_on(g->index, "no_permission")) rc = NVML_ERROR_NO_PERMISSION;
    if (rc == NVML_SUCCESS && !(p = gip_by_id(g, (int)profileId))) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) hang_if_faulted(g->index);
    /* Fault gi_create_fails: the driver refuses the new GPU instance with an error NVML cannot name. */
    int changed = 0;
    if (rc == NVML_SUCCESS && fault_fires(g->index, "gi_create_fails", &changed)) {
        if (changed) write_state();
        rc = NVML_ERROR_UNKNOWN;
    }
    if (rc != NVML_SUCCESS) return end_mutation(rc);
    unsigned mask = gi_memory_mask(g);
    int used = gi_compute_used(g), existing = gi_count_of(g, p->id), k = -1;
    if (want) {
        for (int j = 0; j < p->nplc; j++)
            if ((unsigned)p->plc[j].start == want->start && (unsigned)p->plc[j].size == want->size) k = j;
        if (k < 0) return end_mutation(NVML_ERROR_INVALID_ARGUMENT); /* not one of the possible placements */
        if ((mask & mask_of(p->plc[k].start, p->plc[k].size)) || existing >= p->instances ||
            used + p->slices > g->compute_slices)
            return end_mutation(NVML_ERROR_INSUFFICIENT_RESOURCES);
    } else if ((k = choose_gi_placement(g, p, mask, used, existing)) < 0) {
        return end_mutation(NVML_ERROR_INSUFFICIENT_RESOURCES);
    }
    if (g->ngi >= MAX_GI) return end_mutation(NVML_ERROR_INSUFFICIENT_RESOURCES);
    gi_t *gi = &g->gi[g->ngi++];
    memset(gi, 0, sizeof *gi);
    gi->profile = p->id; gi->start = p->plc[k].start; gi->size = p->plc[k].size;
    gi->id = (g->mem_slices / gi->size - 1) + gi->start / gi->size; /* buddy-tree slot id (derived) */
    *out = gi_handle(g->index, gi->id);
    return end_mutation(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t d, unsigned int profileId, nvmlGpuInstance_t *gi) {
    return create_gi(d, profileId, NULL, gi);
}
EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t d, unsigned int profileId,
                                                             const nvmlGpuInstancePlacement_t *placement,
                                                             nvmlGpuInstance_t *gi) {
    if (!placement) return init_count ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    return create_gi(d, profileId, placement, gi);
}
EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t h) {
    API_GUARD;
    TRY(begin_mutation());
    gpu_t *g; gi_t *gi;
    nvmlReturn_t rc = resolve_gi(h, &g, &gi);
    if (rc == NVML_SUCCESS && fault_on(g->index, "no_permission")) rc = NVML_ERROR_NO_PERMISSION;
    if (rc == NVML_SUCCESS) {
        /* IN_USE while processes or compute instances are active on it (NVML reference). */
        for (int i = 0; i < g->nci; i++) if (g->ci[i].gi == gi->id) rc = NVML_ERROR_IN_USE;
        for (int i = 0; i < g->nproc; i++) if (g->proc[i].gi == gi->id) rc = NVML_ERROR_IN_USE;
    }
    if (rc != NVML_SUCCESS) return end_mutation(rc);
    int idx = (int)(gi - g->gi);
    memmove(&g->gi[idx], &g->gi[idx + 1], sizeof(gi_t) * (size_t)(g->ngi - idx - 1));
    g->ngi--;
    return end_mutation(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t d, unsigned int profileId, nvmlGpuInstance_t *gis,
                                              unsigned int *count) {
    ENTER();
    gpu_t *g;
    TRY(resolve_gpu_only(d, &g));
    if (!count || !gis) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->mig_capable || !g->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    if (!gip_by_id(g, (int)profileId)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (int i = 0; i < g->ngi; i++)
        if (g->gi[i].profile == (int)profileId) gis[n++] = gi_handle(g->index, g->gi[i].id);
    *count = n;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned int id, nvmlGpuInstance_t *gi) {
    ENTER();
    gpu_t *g;
    TRY(resolve_gpu_only(d, &g));
    if (!gi) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->mig_capable || !g->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    if (!gi_by_id(g, (int)id)) return NVML_ERROR_NOT_FOUND;
    *gi = gi_handle(g->index, (int)id);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t h, nvmlGpuInstanceInfo_t *info) {
    ENTER();
    gpu_t *g; gi_t *gi;
    TRY(resolve_gi(h, &g, &gi));
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    info->device = device_handle(g->index); info->id = (unsigned)gi->id; info->profileId = (unsigned)gi->profile;
    info->placement.start = (unsigned)gi->start; info->placement.size = (unsigned)gi->size;
    return NVML_SUCCESS;
}

/* ---- compute instances ---- */
static nvmlReturn_t cip_for_index(nvmlGpuInstance_t h, unsigned profile, unsigned eng, gpu_t **g, gi_t **gi,
                                  cip_t **p) {
    TRY(resolve_gi(h, g, gi));
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || eng >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *p = cip_find(*g, (*gi)->profile, 1, (int)profile);
    return *p ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t h, unsigned int profile,
                                                                 unsigned int engProfile,
                                                                 nvmlComputeInstanceProfileInfo_t *info) {
    ENTER();
    gpu_t *g; gi_t *gi; cip_t *p;
    TRY(cip_for_index(h, profile, engProfile, &g, &gi, &p));
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    gip_t *gp = gip_by_id(g, gi->profile);
    info->id = (unsigned)p->id; info->sliceCount = (unsigned)p->slices; info->instanceCount = (unsigned)p->instances;
    info->multiprocessorCount = (unsigned)p->sms; info->sharedCopyEngineCount = (unsigned)gp->ce;
    info->sharedDecoderCount = (unsigned)gp->dec; info->sharedEncoderCount = (unsigned)gp->enc;
    info->sharedJpegCount = (unsigned)gp->jpeg; info->sharedOfaCount = (unsigned)gp->ofa;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t h, unsigned int profile,
                                                                  unsigned int engProfile, void *out) {
    ENTER();
    gpu_t *g; gi_t *gi; cip_t *p;
    TRY(cip_for_index(h, profile, engProfile, &g, &gi, &p));
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    gip_t *gp = gip_by_id(g, gi->profile);
    unsigned version = *(unsigned *)out;
    if (version == 0 || version == nvmlComputeInstanceProfileInfo_v2 || version == nvmlComputeInstanceProfileInfo_v3) {
        nvmlComputeInstanceProfileInfo_v3_t *i = out; /* v2 is v3 without the trailing capabilities */
        i->id = (unsigned)p->id; i->sliceCount = (unsigned)p->slices; i->instanceCount = (unsigned)p->instances;
        i->multiprocessorCount = (unsigned)p->sms; i->sharedCopyEngineCount = (unsigned)gp->ce;
        i->sharedDecoderCount = (unsigned)gp->dec; i->sharedEncoderCount = (unsigned)gp->enc;
        i->sharedJpegCount = (unsigned)gp->jpeg; i->sharedOfaCount = (unsigned)gp->ofa;
        snprintf(i->name, sizeof i->name, "%s", p->name);
        if (version == nvmlComputeInstanceProfileInfo_v3) i->capabilities = 0;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}
static unsigned ci_mask(gpu_t *g, int gi) {
    unsigned m = 0;
    for (int i = 0; i < g->nci; i++) if (g->ci[i].gi == gi) m |= mask_of(g->ci[i].start, g->ci[i].size);
    return m;
}
static int ci_count_of(gpu_t *g, int gi, int profile) {
    int n = 0;
    for (int i = 0; i < g->nci; i++) n += g->ci[i].gi == gi && g->ci[i].profile == profile;
    return n;
}
static int choose_ci_placement(cip_t *p, unsigned mask, int existing) {
    if (existing >= p->instances) return -1;
    for (int k = 0; k < p->nplc; k++) /* lowest free start */
        if (!(mask & mask_of(p->plc[k].start, p->plc[k].size))) return k;
    return -1;
}
static nvmlReturn_t cip_for_id(nvmlGpuInstance_t h, unsigned profileId, gpu_t **g, gi_t **gi, cip_t **p) {
    TRY(resolve_gi(h, g, gi));
    *p = cip_find(*g, (*gi)->profile, 0, (int)profileId);
    return *p ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t h, unsigned int profileId,
                                                                       unsigned int *count) {
    ENTER();
    gpu_t *g; gi_t *gi; cip_t *p;
    TRY(cip_for_id(h, profileId, &g, &gi, &p));
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned mask = ci_mask(g, gi->id);
    int existing = ci_count_of(g, gi->id, p->id), n = 0, k;
    while ((k = choose_ci_placement(p, mask, existing)) >= 0) {
        mask |= mask_of(p->plc[k].start, p->plc[k].size); existing++; n++;
    }
    *count = (unsigned)n;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t h, unsigned int profileId,
                                                                        nvmlComputeInstancePlacement_t *plc,
                                                                        unsigned int *count) {
    ENTER();
    gpu_t *g; gi_t *gi; cip_t *p;
    TRY(cip_for_id(h, profileId, &g, &gi, &p));
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!plc) { *count = (unsigned)p->nplc; return NVML_SUCCESS; }
    if (*count < (unsigned)p->nplc) { *count = (unsigned)p->nplc; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (int k = 0; k < p->nplc; k++) { plc[k].start = (unsigned)p->plc[k].start; plc[k].size = (unsigned)p->plc[k].size; }
    *count = (unsigned)p->nplc;
    return NVML_SUCCESS;
}

static void make_mig_uuid(gpu_t *g, int gi, int ci, char *out, size_t cap) {
    /* Stable per (GPU, GI, CI, boot, creation count): FNV-1a over those, formatted as a UUID. */
    unsigned long long h1 = 1469598103934665603ULL, h2 = 1099511628211ULL * 31;
    char seed[STR * 2];
    snprintf(seed, sizeof seed, "%s/%d/%d/%d/%d", g->uuid, gi, ci, S.boot, g->nci);
    for (const char *s = seed; *s; s++) {
        h1 = (h1 ^ (unsigned char)*s) * 1099511628211ULL;
        h2 = (h2 ^ (unsigned char)*s) * 1099511628211ULL + 0x9e3779b97f4a7c15ULL;
    }
    snprintf(out, cap, "MIG-%08llx-%04llx-4%03llx-%04llx-%012llx", h1 >> 32, (h1 >> 16) & 0xffff, h1 & 0xfff,
             0x8000 | ((h2 >> 48) & 0x3fff), h2 & 0xffffffffffffULL);
}

static nvmlReturn_t create_ci(nvmlGpuInstance_t h, unsigned profileId, const nvmlComputeInstancePlacement_t *want,
                              nvmlComputeInstance_t *out) {
    API_GUARD;
    TRY(begin_mutation());
    gpu_t *g; gi_t *gi; cip_t *p = NULL;
    nvmlReturn_t rc = resolve_gi(h, &g, &gi);
    if (rc == NVML_SUCCESS && !out) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && fault_on(g->index, "no_permission")) rc = NVML_ERROR_NO_PERMISSION;
    if (rc == NVML_SUCCESS && !(p = cip_find(g, gi->profile, 0, (int)profileId))) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS) return end_mutation(rc);
    unsigned mask = ci_mask(g, gi->id);
    int existing = ci_count_of(g, gi->id, p->id), k = -1;
    if (want) {
        for (int j = 0; j < p->nplc; j++)
            if ((unsigned)p->plc[j].start == want->start && (unsigned)p->plc[j].size == want->size) k = j;
        if (k < 0) return end_mutation(NVML_ERROR_INVALID_ARGUMENT);
        if ((mask & mask_of(p->plc[k].start, p->plc[k].size)) || existing >= p->instances)
            return end_mutation(NVML_ERROR_INSUFFICIENT_RESOURCES);
    } else if ((k = choose_ci_placement(p, mask, existing)) < 0) {
        return end_mutation(NVML_ERROR_INSUFFICIENT_RESOURCES);
    }
    int id = 0;
    while (ci_by_id(g, gi->id, id)) id++;
    if (g->nci >= MAX_CI || id >= MAX_CI_PER_GI) return end_mutation(NVML_ERROR_INSUFFICIENT_RESOURCES);
    ci_t *ci = &g->ci[g->nci];
    memset(ci, 0, sizeof *ci);
    ci->gi = gi->id; ci->id = id; ci->profile = p->id; ci->start = p->plc[k].start; ci->size = p->plc[k].size;
    make_mig_uuid(g, gi->id, id, ci->uuid, sizeof ci->uuid);
    g->nci++;
    *out = ci_handle(g->index, gi->id, id);
    return end_mutation(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t h, unsigned int profileId,
                                                         nvmlComputeInstance_t *ci) {
    return create_ci(h, profileId, NULL, ci);
}
EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t h, unsigned int profileId,
                                                                      const nvmlComputeInstancePlacement_t *plc,
                                                                      nvmlComputeInstance_t *ci) {
    if (!plc) return init_count ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    return create_ci(h, profileId, plc, ci);
}
static nvmlReturn_t resolve_ci(nvmlComputeInstance_t h, gpu_t **g, gi_t **gi, ci_t **ci) {
    if (!valid_handle(h, H_CI)) return NVML_ERROR_INVALID_ARGUMENT;
    *g = &S.gpu[h->gpu];
    *gi = gi_by_id(*g, h->gi);
    *ci = *gi ? ci_by_id(*g, h->gi, h->ci) : NULL;
    return *ci && (*g)->mig_current ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}
EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t h) {
    API_GUARD;
    TRY(begin_mutation());
    gpu_t *g; gi_t *gi; ci_t *ci;
    nvmlReturn_t rc = resolve_ci(h, &g, &gi, &ci);
    if (rc == NVML_SUCCESS && fault_on(g->index, "no_permission")) rc = NVML_ERROR_NO_PERMISSION;
    if (rc == NVML_SUCCESS)
        for (int i = 0; i < g->nproc; i++)
            if (g->proc[i].gi == ci->gi && g->proc[i].ci == ci->id) rc = NVML_ERROR_IN_USE;
    if (rc != NVML_SUCCESS) return end_mutation(rc);
    int idx = (int)(ci - g->ci);
    memmove(&g->ci[idx], &g->ci[idx + 1], sizeof(ci_t) * (size_t)(g->nci - idx - 1));
    g->nci--;
    return end_mutation(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t h, unsigned int profileId,
                                                       nvmlComputeInstance_t *cis, unsigned int *count) {
    ENTER();
    gpu_t *g; gi_t *gi; cip_t *p;
    TRY(cip_for_id(h, profileId, &g, &gi, &p));
    if (!cis || !count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (int i = 0; i < g->nci; i++)
        if (g->ci[i].gi == gi->id && g->ci[i].profile == p->id) cis[n++] = ci_handle(g->index, gi->id, g->ci[i].id);
    *count = n;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t h, unsigned int id,
                                                          nvmlComputeInstance_t *ci) {
    ENTER();
    gpu_t *g; gi_t *gi;
    TRY(resolve_gi(h, &g, &gi));
    if (!ci) return NVML_ERROR_INVALID_ARGUMENT;
    if (!ci_by_id(g, gi->id, (int)id)) return NVML_ERROR_NOT_FOUND;
    *ci = ci_handle(g->index, gi->id, (int)id);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t h, nvmlComputeInstanceInfo_t *info) {
    ENTER();
    gpu_t *g; gi_t *gi; ci_t *ci;
    TRY(resolve_ci(h, &g, &gi, &ci));
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    info->device = device_handle(g->index); info->gpuInstance = gi_handle(g->index, gi->id);
    info->id = (unsigned)ci->id; info->profileId = (unsigned)ci->profile;
    info->placement.start = (unsigned)ci->start; info->placement.size = (unsigned)ci->size;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t h, nvmlComputeInstanceInfo_t *info) {
    return nvmlComputeInstanceGetInfo_v2(h, info);
}

/* ---- MIG devices ---- */
EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *isMig) {
    ENTER();
    gpu_t *g;
    TRY(resolve_device(d, &g, NULL, NULL));
    if (!isMig) return NVML_ERROR_INVALID_ARGUMENT;
    *isMig = d->kind == H_MIG;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    ENTER();
    gpu_t *g; gi_t *gi;
    TRY(resolve_device(d, &g, &gi, NULL));
    if (!id || !gi) return NVML_ERROR_INVALID_ARGUMENT;
    *id = (unsigned)gi->id;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
    ENTER();
    gpu_t *g; ci_t *ci;
    TRY(resolve_device(d, &g, NULL, &ci));
    if (!id || !ci) return NVML_ERROR_INVALID_ARGUMENT;
    *id = (unsigned)ci->id;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    ENTER();
    gpu_t *g;
    TRY(resolve_gpu_only(d, &g));
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    *count = g->mig_current ? (unsigned)g->max_mig : 0; /* 0 while MIG is off (ref h200 reading) */
    return NVML_SUCCESS;
}
/* MIG devices in a stable order: by GI id, then CI id. */
static int sorted_cis(gpu_t *g, ci_t **out) {
    int n = 0;
    for (int i = 0; i < g->nci; i++) out[n++] = &g->ci[i];
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && (out[j - 1]->gi > out[j]->gi || (out[j - 1]->gi == out[j]->gi && out[j - 1]->id > out[j]->id)); j--) {
            ci_t *t = out[j]; out[j] = out[j - 1]; out[j - 1] = t;
        }
    return n;
}
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *mig) {
    ENTER();
    gpu_t *g;
    TRY(resolve_gpu_only(d, &g));
    if (!mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->mig_capable || !g->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    if (index >= (unsigned)g->max_mig) return NVML_ERROR_INVALID_ARGUMENT;
    ci_t *list[MAX_CI];
    int n = sorted_cis(g, list);
    if (index >= (unsigned)n) return NVML_ERROR_NOT_FOUND;
    *mig = mig_handle(g->index, list[index]->gi, list[index]->id);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *d) {
    ENTER();
    gpu_t *g; ci_t *ci;
    TRY(resolve_device(mig, &g, NULL, &ci));
    if (!d || !ci) return NVML_ERROR_INVALID_ARGUMENT;
    *d = device_handle(g->index);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t *a) {
    ENTER();
    gpu_t *g; gi_t *gi; ci_t *ci;
    TRY(resolve_device(d, &g, &gi, &ci));
    if (!a) return NVML_ERROR_INVALID_ARGUMENT;
    memset(a, 0, sizeof *a);
    if (!ci) {
        a->multiprocessorCount = (unsigned)g->sms; a->gpuInstanceSliceCount = (unsigned)g->compute_slices;
        a->computeInstanceSliceCount = (unsigned)g->compute_slices; a->memorySizeMB = g->mem_total / MIB;
        return NVML_SUCCESS;
    }
    gip_t *gp = gip_by_id(g, gi->profile);
    const cip_t *cp = ci_profile_of(g, gi, ci);
    if (!gp || !cp) return NVML_ERROR_UNKNOWN;
    a->multiprocessorCount = (unsigned)cp->sms; a->sharedCopyEngineCount = (unsigned)gp->ce;
    a->sharedDecoderCount = (unsigned)gp->dec; a->sharedEncoderCount = (unsigned)gp->enc;
    a->sharedJpegCount = (unsigned)gp->jpeg; a->sharedOfaCount = (unsigned)gp->ofa;
    a->gpuInstanceSliceCount = (unsigned)gp->slices; a->computeInstanceSliceCount = (unsigned)cp->slices;
    a->memorySizeMB = gp->mem_mb;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t d, nvmlDeviceAttributes_t *a) {
    return nvmlDeviceGetAttributes_v2(d, a);
}

/* ---- events (nvmlEventSet*, what NVIDIA's device plugin health check waits on) ----
 * The simulated hardware raises no events: registration succeeds for the ECC and Xid types a data-center GPU
 * supports, and a wait returns NVML_ERROR_TIMEOUT after its timeout (without holding the API lock). */
#define NVML_EVENT_TYPE_SINGLE_BIT_ECC 0x1ULL
#define NVML_EVENT_TYPE_DOUBLE_BIT_ECC 0x2ULL
#define NVML_EVENT_TYPE_XID_CRITICAL 0x8ULL
#define EVENT_SET_MAGIC 0x45564e54u
typedef struct { unsigned magic; unsigned long long types; } sim_event_set;
typedef sim_event_set *nvmlEventSet_t;
typedef struct {
    nvmlDevice_t device; unsigned long long eventType, eventData; unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    ENTER();
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    sim_event_set *s = calloc(1, sizeof *s);
    if (!s) return NVML_ERROR_MEMORY;
    s->magic = EVENT_SET_MAGIC;
    *set = s;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    API_GUARD;
    if (!set || set->magic != EVENT_SET_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    set->magic = 0;
    free(set);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    ENTER();
    gpu_t *g;
    TRY(resolve_gpu_only(d, &g));
    if (!types) return NVML_ERROR_INVALID_ARGUMENT;
    *types = NVML_EVENT_TYPE_SINGLE_BIT_ECC | NVML_EVENT_TYPE_DOUBLE_BIT_ECC | NVML_EVENT_TYPE_XID_CRITICAL;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    ENTER();
    gpu_t *g;
    TRY(resolve_gpu_only(d, &g));
    if (!set || set->magic != EVENT_SET_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~(NVML_EVENT_TYPE_SINGLE_BIT_ECC | NVML_EVENT_TYPE_DOUBLE_BIT_ECC | NVML_EVENT_TYPE_XID_CRITICAL))
        return NVML_ERROR_NOT_SUPPORTED;
    set->types |= types;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    {
        API_GUARD;
        if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
        if (!set || set->magic != EVENT_SET_MAGIC || !data) return NVML_ERROR_INVALID_ARGUMENT;
    }
    usleep((useconds_t)timeoutms * 1000u);
    return NVML_ERROR_TIMEOUT;
}
EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}
