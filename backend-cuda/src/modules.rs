//! The kernels' module, loaded once per device from the embedded fatbin.

use crate::call;
use crate::driver::{CUfunction, CUmodule, Shared};
use crate::kernels::{
    self, KERNEL_NAMES, LARGE_KERNEL_NAMES, MEDIUM_KERNEL_NAMES, ONE_SHOT_KERNEL_NAMES,
    SMALL_KERNEL_NAMES,
};
use cudarc::driver::sys;
use oxccl_core::config::{self, vars};
use oxccl_core::datatype::DataType;
use oxccl_core::error::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::sync::{Mutex, OnceLock, RwLock};

/// A loaded module and its entry points: [`KERNEL_NAMES`], [`LARGE_KERNEL_NAMES`],
/// [`SMALL_KERNEL_NAMES`], [`MEDIUM_KERNEL_NAMES`], [`ONE_SHOT_KERNEL_NAMES`].
type Loaded = (Shared<CUmodule>, Vec<Shared<CUfunction>>);

/// Which entry point family a launch uses: how many argument bytes its parameters carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamsSize {
    /// `OxcclKernelParams`: 4000 bytes inline, or the block's address.
    Default = 0,
    /// `OxcclKernelParamsLarge`: 16000 bytes inline.
    Large = 1,
    /// `OxcclKernelParamsSmall`: 1008 bytes inline.
    Small = 2,
    /// `OxcclKernelParamsMedium`: 8000 bytes inline.
    Medium = 3,
}

impl ParamsSize {
    /// The smallest family whose parameters hold a block of `bytes` inline (when `inline`),
    /// else the default one, which carries the block's address; and its inline capacity.
    pub fn for_block(bytes: usize, inline: bool) -> (ParamsSize, usize) {
        use crate::kernels::{
            CUDA_INLINE_ARGS_BYTES, CUDA_LARGE_INLINE_ARGS_BYTES, CUDA_MEDIUM_INLINE_ARGS_BYTES,
            CUDA_SMALL_INLINE_ARGS_BYTES,
        };
        match bytes {
            _ if !inline => (ParamsSize::Default, CUDA_INLINE_ARGS_BYTES),
            b if b <= CUDA_SMALL_INLINE_ARGS_BYTES => {
                (ParamsSize::Small, CUDA_SMALL_INLINE_ARGS_BYTES)
            }
            b if b <= CUDA_INLINE_ARGS_BYTES => (ParamsSize::Default, CUDA_INLINE_ARGS_BYTES),
            b if b <= CUDA_MEDIUM_INLINE_ARGS_BYTES => {
                (ParamsSize::Medium, CUDA_MEDIUM_INLINE_ARGS_BYTES)
            }
            _ => (ParamsSize::Large, CUDA_LARGE_INLINE_ARGS_BYTES),
        }
    }
}

/// Per-device executor entry points.
#[derive(Default)]
pub struct Modules {
    loaded: Mutex<HashMap<i32, Loaded>>,
    /// The entry points whose code waits for the launch before them
    /// (`oxccl_grid_dependency_wait`), so they may be launched programmatically dependent.
    dependent_ok: RwLock<HashSet<usize>>,
}

/// The first SM version whose cubins hold the kernels' dependency wait (`griddepcontrol`).
const DEPENDENT_LAUNCH_SM: i32 = 90;

/// Whether launches may overlap the previous kernel's end (`OXCCL_PDL=0` turns it off).
fn dependent_launch_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| config::get(&vars::OXCCL_PDL))
}

impl Modules {
    /// The entry point for `dtype` on `device` with parameters of `size`; the device's context
    /// must be current.
    pub fn function(
        &self,
        device: i32,
        dtype: DataType,
        size: ParamsSize,
    ) -> Result<Shared<CUfunction>> {
        self.entry(device, dtype as usize + size as usize * KERNEL_NAMES.len())
    }

    /// The one-shot entry point for `dtype` on `device`; the device's context must be current.
    pub fn one_shot(&self, device: i32, dtype: DataType) -> Result<Shared<CUfunction>> {
        self.entry(device, dtype as usize + 4 * KERNEL_NAMES.len())
    }

    /// Entry point `at` of the concatenated name lists, loading the module on first use.
    fn entry(&self, device: i32, at: usize) -> Result<Shared<CUfunction>> {
        let mut m = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, f)) = m.get(&device) {
            return Ok(f[at]);
        }
        if !kernels::kernels_built() {
            return Err(Error::usage(
                "oxccl was built without device kernels (no nvcc at build time)",
            ));
        }
        let mut module: CUmodule = std::ptr::null_mut();
        // SAFETY: FATBIN is a complete, 16-byte aligned fatbin image that lives forever.
        unsafe {
            call!(cuModuleLoadData(
                &mut module,
                kernels::FATBIN.as_ptr().cast()
            ))
        }?;
        let mut funcs = Vec::with_capacity(5 * KERNEL_NAMES.len());
        // In `ParamsSize` order, then the one-shot kernels.
        for name in KERNEL_NAMES
            .iter()
            .chain(&LARGE_KERNEL_NAMES)
            .chain(&SMALL_KERNEL_NAMES)
            .chain(&MEDIUM_KERNEL_NAMES)
            .chain(&ONE_SHOT_KERNEL_NAMES)
        {
            let c = CString::new(*name).expect("kernel names have no NUL");
            let mut f: CUfunction = std::ptr::null_mut();
            // SAFETY: `module` was loaded above; `c` is NUL-terminated.
            unsafe { call!(cuModuleGetFunction(&mut f, module, c.as_ptr())) }?;
            funcs.push(Shared(f));
        }
        // The device runs one cubin of the fatbin for all its entry points: the one for its
        // own SM, or an older one (then without the wait, which only sm_90 code has).
        let mut sm = 0;
        // SAFETY: `funcs[0]` is a function of the module loaded above; `sm` is written.
        let binary = unsafe {
            call!(cuFuncGetAttribute(
                &mut sm,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_BINARY_VERSION,
                funcs[0].0
            ))
        };
        if binary.is_ok() && sm >= DEPENDENT_LAUNCH_SM && dependent_launch_enabled() {
            let mut ok = self.dependent_ok.write().unwrap_or_else(|p| p.into_inner());
            ok.extend(funcs.iter().map(|f| f.0 as usize));
        }
        let f = funcs[at];
        m.insert(device, (Shared(module), funcs));
        Ok(f)
    }

    /// Whether `func` may start while the kernel before it in the stream finishes.
    pub fn dependent_launch(&self, func: CUfunction) -> bool {
        let ok = self.dependent_ok.read().unwrap_or_else(|p| p.into_inner());
        ok.contains(&(func as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::ParamsSize::{self, *};

    #[test]
    fn smallest_parameters_that_hold_the_block() {
        assert_eq!(ParamsSize::for_block(300, true), (Small, 1008));
        assert_eq!(ParamsSize::for_block(1008, true), (Small, 1008));
        assert_eq!(ParamsSize::for_block(1009, true), (Default, 4000));
        assert_eq!(ParamsSize::for_block(4000, true), (Default, 4000));
        assert_eq!(ParamsSize::for_block(4001, true), (Medium, 8000));
        assert_eq!(ParamsSize::for_block(8000, true), (Medium, 8000));
        assert_eq!(ParamsSize::for_block(8001, true), (Large, 16000));
        // By address: the default entry points, whatever the size.
        assert_eq!(ParamsSize::for_block(300, false), (Default, 4000));
        assert_eq!(ParamsSize::for_block(1 << 20, false), (Default, 4000));
    }
}
