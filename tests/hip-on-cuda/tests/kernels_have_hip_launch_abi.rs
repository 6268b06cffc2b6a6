//! The kernels `hip-on-cuda-kernels` hands out take what backend-hip passes: every entry point of
//! `KERNEL_NAMES`, each with one parameter of HIP's size (`PARAMS_HEADER_BYTES +
//! HIP_INLINE_ARGS_BYTES` = 32 bytes, the argument block's address), where backend-cuda's take
//! 4016 bytes and have `_large`/`_small` twins. Read from the PTX the fatbin carries uncompressed.

use oxccl_kernel_abi::{HIP_INLINE_ARGS_BYTES, KERNEL_NAMES, PARAMS_HEADER_BYTES};

static KERNELS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/oxccl-hip-abi.fatbin"));

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn every_entry_point_takes_hips_parameter() {
    if KERNELS.is_empty() {
        eprintln!("built without nvcc: no kernels to check");
        return;
    }
    let bytes = PARAMS_HEADER_BYTES + HIP_INLINE_ARGS_BYTES;
    for name in KERNEL_NAMES {
        let param = format!("{name}_param_0[{bytes}]");
        assert!(contains(KERNELS, &param), "{param} not in the PTX");
        assert!(
            !contains(KERNELS, &format!("{name}_large")),
            "{name}_large: built with CUDA's launch ABI"
        );
    }
}
