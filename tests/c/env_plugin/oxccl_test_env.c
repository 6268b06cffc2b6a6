/*
 * An environment plugin for oxccl's tests, written against the ABI NCCL loads
 * (ncclEnvPlugin_v1; with -DOXTEST_ENV_V2 the v2 one, whose init also takes the logger). It
 * answers OXTEST_ENV_PROBE and OXCCL_OP_TIMEOUT itself, records the version oxccl reports in
 * OXTEST_ENV_SEEN_VERSION, and hands every other name to getenv.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int result_t;
typedef void (*logger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt,
                         ...);

static char version[64] = "";

static result_t record(uint8_t major, uint8_t minor, uint8_t patch, const char* suffix) {
  snprintf(version, sizeof version, "%u.%u.%u%s", major, minor, patch, suffix ? suffix : "");
  return 0;
}

static result_t finish(void) { return 0; }

static const char* lookup(const char* name) {
  if (strcmp(name, "OXTEST_ENV_PROBE") == 0) return "from the plugin";
  if (strcmp(name, "OXCCL_OP_TIMEOUT") == 0) return "7";
  if (strcmp(name, "OXTEST_ENV_SEEN_VERSION") == 0) return version;
  return getenv(name);
}

#if defined(OXTEST_ENV_V2)
static result_t init_v2(uint8_t major, uint8_t minor, uint8_t patch, const char* suffix, logger_t log) {
  if (log != NULL) log(3, 0x80, __FILE__, __LINE__, "oxtest env plugin v2 for %u.%u.%u", major, minor, patch);
  return record(major, minor, patch, suffix);
}
struct { const char* name; void* init; void* finalize; void* get_env; } ncclEnvPlugin_v2 = {
    "oxtest-env-v2", (void*)init_v2, (void*)finish, (void*)lookup};
#else
struct { const char* name; void* init; void* finalize; void* get_env; } ncclEnvPlugin_v1 = {
    "oxtest-env-v1", (void*)record, (void*)finish, (void*)lookup};
#endif
