/* Input of backend-hip/regen-bindings.sh: the HIP runtime API that src/sys.rs declares. */
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>
