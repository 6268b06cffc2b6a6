//! The kernels' module, loaded once per device from the embedded fatbin.

use crate::call;
use crate::driver::{CUfunction, CUmodule, Shared};
use crate::kernels::{self, KERNEL_NAMES, LARGE_KERNEL_NAMES};
use oxccl_core::datatype::DataType;
use oxccl_core::error::{Error, Result};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Mutex;

/// A loaded module and its entry points: [`KERNEL_NAMES`] then [`LARGE_KERNEL_NAMES`].
type Loaded = (Shared<CUmodule>, Vec<Shared<CUfunction>>);

/// Per-device executor entry points.
#[derive(Default)]
pub struct Modules {
    loaded: Mutex<HashMap<i32, Loaded>>,
}

impl Modules {
    /// The entry point for `dtype` on `device` (`large`: the one with large inline
    /// parameters); the device's context must be current.
    pub fn function(
        &self,
        device: i32,
        dtype: DataType,
        large: bool,
    ) -> Result<Shared<CUfunction>> {
        let at = dtype as usize + if large { KERNEL_NAMES.len() } else { 0 };
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
        let mut funcs = Vec::with_capacity(2 * KERNEL_NAMES.len());
        for name in KERNEL_NAMES.iter().chain(&LARGE_KERNEL_NAMES) {
            let c = CString::new(*name).expect("kernel names have no NUL");
            let mut f: CUfunction = std::ptr::null_mut();
            // SAFETY: `module` was loaded above; `c` is NUL-terminated.
            unsafe { call!(cuModuleGetFunction(&mut f, module, c.as_ptr())) }?;
            funcs.push(Shared(f));
        }
        let f = funcs[at];
        m.insert(device, (Shared(module), funcs));
        Ok(f)
    }
}
