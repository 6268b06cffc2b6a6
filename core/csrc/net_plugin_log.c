/* The logger oxccl hands to network plugins.
 *
 * NCCL's plugin ABI passes a C-variadic logging function to a plugin's init. Stable Rust cannot
 * define such a function, so this file does: it formats the message with vsnprintf and passes
 * the finished text to a Rust callback (set once with oxccl_net_log_set_sink), which logs it
 * through `tracing`. Levels above the one Rust set are dropped before formatting. */
#include <stdarg.h>
#include <stdio.h>

typedef void (*oxccl_net_log_sink)(int level, unsigned long flags, const char *file, int line,
                                   const char *msg);

static oxccl_net_log_sink sink;
static int max_level;

void oxccl_net_log_set_sink(oxccl_net_log_sink s, int level) {
  __atomic_store_n(&max_level, level, __ATOMIC_RELAXED);
  __atomic_store_n(&sink, s, __ATOMIC_RELEASE);
}

void oxccl_net_plugin_logger(int level, unsigned long flags, const char *file, int line,
                             const char *fmt, ...) {
  oxccl_net_log_sink s = __atomic_load_n(&sink, __ATOMIC_ACQUIRE);
  /* ABORT (4) always passes; the others pass up to the level set. */
  if (s == NULL || fmt == NULL || (level != 4 && level > __atomic_load_n(&max_level, __ATOMIC_RELAXED)))
    return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0)
    msg[0] = '\0';
  s(level, flags, file, line, msg);
}
