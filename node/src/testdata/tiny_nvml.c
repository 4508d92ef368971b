/* A tiny NVML stand-in for gpuhook-node's unit tests (built with gcc at test time).
 * Two GPUs: GPU 0 (minor 2) a T4; GPU 1 (minor 5) an A100 in MIG mode whose MIG devices sit at
 * NVML MIG indexes 0 and 2 (index 1 is a gap, as after destroying an instance).
 * Built with -DINIT_FAIL, nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED. */
#include <string.h>

typedef struct dev { int gpu; int mig; const char *uuid, *name; unsigned minor, gi, ci;
                     unsigned long long mem; unsigned mode; } dev;
static dev devs[] = {
  {0, -1, "GPU-aaaaaaaa-0000-0000-0000-000000000000", "Tesla T4", 2, 0, 0, 15360ULL << 20, 0},
  {1, -1, "GPU-bbbbbbbb-0000-0000-0000-000000000000", "NVIDIA A100-SXM4-80GB", 5, 0, 0, 81920ULL << 20, 0},
  {1, 0, "MIG-cccccccc-0000-0000-0000-000000000000", "NVIDIA A100-SXM4-80GB MIG 3g.40gb", 0, 2, 0, 40192ULL << 20, 0},
  {1, 2, "MIG-dddddddd-0000-0000-0000-000000000000", "NVIDIA A100-SXM4-80GB MIG 1g.10gb", 0, 9, 0, 9728ULL << 20, 0},
};
#define NDEV (sizeof devs / sizeof devs[0])
static int inited;

static unsigned copy(char *buf, unsigned len, const char *s) {
  if (strlen(s) + 1 > len) return 7; /* INSUFFICIENT_SIZE */
  strcpy(buf, s); return 0;
}
unsigned nvmlInit_v2(void) {
#ifdef INIT_FAIL
  return 9;
#endif
  inited++; return 0;
}
unsigned nvmlShutdown(void) { if (!inited) return 1; inited--; return 0; }
const char *nvmlErrorString(unsigned rc) {
  switch (rc) { case 0: return "Success"; case 9: return "Driver Not Loaded"; case 6: return "Not Found";
                default: return "Unknown Error"; }
}
unsigned nvmlSystemGetDriverVersion(char *b, unsigned l) { return copy(b, l, "570.158.01"); }
unsigned nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12080; return 0; }
unsigned nvmlDeviceGetCount_v2(unsigned *n) { *n = 2; return inited ? 0 : 1; }
unsigned nvmlDeviceGetHandleByIndex_v2(unsigned i, dev **d) { if (i >= 2) return 2; *d = &devs[i]; return 0; }
unsigned nvmlDeviceGetHandleByUUID(const char *u, dev **d) {
  for (unsigned i = 0; i < NDEV; i++) if (!strcmp(devs[i].uuid, u)) { *d = &devs[i]; return 0; }
  return 6;
}
unsigned nvmlDeviceGetUUID(dev *d, char *b, unsigned l) { return copy(b, l, d->uuid); }
unsigned nvmlDeviceGetName(dev *d, char *b, unsigned l) { return copy(b, l, d->name); }
unsigned nvmlDeviceGetMinorNumber(dev *d, unsigned *m) { if (d->mig >= 0) return 3; *m = d->minor; return 0; }
typedef struct { char legacy[16]; unsigned domain, bus, device, id, sub; char busId[32]; } pci;
unsigned nvmlDeviceGetPciInfo_v3(dev *d, pci *p) {
  memset(p, 0, sizeof *p);
  strcpy(p->busId, d->gpu == 0 ? "00000000:07:00.0" : "00000000:C1:00.0");
  return 0;
}
typedef struct { unsigned long long total, free, used; } mem;
unsigned nvmlDeviceGetMemoryInfo(dev *d, mem *m) { m->total = d->mem; m->free = d->mem; m->used = 0; return 0; }
unsigned nvmlDeviceGetBrand(dev *d, unsigned *b) { *b = d->gpu == 0 ? 2 : 14; return 0; }
unsigned nvmlDeviceGetArchitecture(dev *d, unsigned *a) { *a = d->gpu == 0 ? 6 : 7; return 0; }
unsigned nvmlDeviceGetCudaComputeCapability(dev *d, int *ma, int *mi) {
  *ma = d->gpu == 0 ? 7 : 8; *mi = d->gpu == 0 ? 5 : 0; return 0;
}
unsigned nvmlDeviceGetMigMode(dev *d, unsigned *cur, unsigned *pend) {
  if (d->gpu == 0) return 3; /* NOT_SUPPORTED */
  *cur = *pend = 1; return 0;
}
unsigned nvmlDeviceGetMaxMigDeviceCount(dev *d, unsigned *n) { *n = d->gpu == 1 ? 7 : 0; return 0; }
unsigned nvmlDeviceGetMigDeviceHandleByIndex(dev *d, unsigned i, dev **out) {
  for (unsigned k = 0; k < NDEV; k++)
    if (devs[k].gpu == d->gpu && devs[k].mig == (int)i) { *out = &devs[k]; return 0; }
  return 6;
}
unsigned nvmlDeviceGetGpuInstanceId(dev *d, unsigned *id) { *id = d->gi; return d->mig >= 0 ? 0 : 2; }
unsigned nvmlDeviceGetComputeInstanceId(dev *d, unsigned *id) { *id = d->ci; return d->mig >= 0 ? 0 : 2; }
unsigned nvmlDeviceGetComputeMode(dev *d, unsigned *m) { *m = d->mode; return 0; }
unsigned nvmlDeviceSetComputeMode(dev *d, unsigned m) { if (m > 3) return 2; d->mode = m; return 0; }
