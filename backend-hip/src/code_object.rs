//! Where the kernels come from: the code objects embedded at build time ([`kernels::CODE_OBJECT`]),
//! or the file `OXCCL_HIP_CODE_OBJECT` names, loaded with `hipModuleLoadData` instead. The file
//! serves GPUs this build has no code object for (hipcc's `--genco` output from
//! `kernels/common/executor.cu`, docs/hip.md) and the HIP backend run on NVIDIA GPUs in tests
//! (nvcc's fatbin with HIP's launch ABI, `tests/hip-on-cuda`). Its kernels must have the entry
//! names of `oxccl_kernel_abi::KERNEL_NAMES` and HIP's launch ABI (one 32-byte
//! `OxcclKernelParams` holding the argument block's address).

use crate::kernels;
use oxccl_core::error::{Error, Result};
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The variable naming a code object file to load instead of the embedded ones.
pub const CODE_OBJECT_ENV: &str = oxccl_core::config::vars::OXCCL_HIP_CODE_OBJECT.name;

/// 16 bytes kept 16-byte aligned: loaders parse code object headers in place.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Line([u8; 16]);

/// The kernels' code object as the backend loads it.
#[derive(Clone)]
pub struct CodeObject(Source);

#[derive(Clone)]
enum Source {
    /// The offload bundle built into this library (empty when built without hipcc).
    Embedded,
    /// A file read at start-up, kept for the backend's life.
    File {
        /// Where it was read from.
        path: PathBuf,
        /// Its bytes, 16-byte aligned, padded with zeros to a whole line.
        lines: Arc<[Line]>,
    },
}

impl std::fmt::Debug for CodeObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl CodeObject {
    /// The file `OXCCL_HIP_CODE_OBJECT` names (an error naming it when it cannot be read or is
    /// empty), else the embedded code objects.
    pub fn from_env() -> Result<CodeObject> {
        match oxccl_core::config::get(&oxccl_core::config::vars::OXCCL_HIP_CODE_OBJECT) {
            Some(path) => CodeObject::from_file(&path),
            None => Ok(CodeObject::embedded()),
        }
    }

    /// The code objects built into this library.
    pub fn embedded() -> CodeObject {
        CodeObject(Source::Embedded)
    }

    /// Reads a code object file.
    pub fn from_file(path: &Path) -> Result<CodeObject> {
        let unusable = |why: String| Error::System {
            context: format!("{CODE_OBJECT_ENV}={}", path.display()),
            message: why,
        };
        let bytes = std::fs::read(path).map_err(|e| unusable(e.to_string()))?;
        if bytes.is_empty() {
            return Err(unusable("the file is empty".into()));
        }
        let lines: Arc<[Line]> = bytes
            .chunks(16)
            .map(|c| {
                let mut l = [0u8; 16];
                l[..c.len()].copy_from_slice(c);
                Line(l)
            })
            .collect();
        Ok(CodeObject(Source::File {
            path: path.to_path_buf(),
            lines,
        }))
    }

    /// True when there are kernels to load.
    pub fn available(&self) -> bool {
        match &self.0 {
            Source::Embedded => kernels::kernels_built(),
            Source::File { .. } => true,
        }
    }

    /// The image `hipModuleLoadData` reads; valid while `self` lives.
    pub fn image(&self) -> *const c_void {
        match &self.0 {
            Source::Embedded => kernels::CODE_OBJECT.as_ptr().cast(),
            Source::File { lines, .. } => lines.as_ptr().cast(),
        }
    }

    /// For messages: which code object this is.
    pub fn describe(&self) -> String {
        match &self.0 {
            Source::Embedded => format!(
                "the embedded code objects ({})",
                option_env!("OXCCL_HIP_BUILT_ARCHS").unwrap_or("none")
            ),
            Source::File { path, .. } => format!("{CODE_OBJECT_ENV}={}", path.display()),
        }
    }

    /// The error of a launch when there is no code object at all.
    pub fn missing() -> Error {
        Error::usage(format!(
            "the HIP backend was built without device kernels (no hipcc at build time) and \
             {CODE_OBJECT_ENV} is not set; see docs/hip.md"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_kept_aligned_and_whole() {
        let path = std::env::temp_dir().join(format!("oxccl-co-{}.bin", std::process::id()));
        let data: Vec<u8> = (0..37u8).collect();
        std::fs::write(&path, &data).unwrap();
        let co = CodeObject::from_file(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(co.available());
        assert_eq!(co.image() as usize % 16, 0);
        // SAFETY: the file's 37 bytes are at the start of the image, which `co` keeps alive.
        let got = unsafe { std::slice::from_raw_parts(co.image().cast::<u8>(), 37) };
        assert_eq!(got, &data[..]);
        assert!(co.describe().contains(CODE_OBJECT_ENV));
    }

    #[test]
    fn a_missing_or_empty_file_is_an_error_naming_it() {
        let path = std::env::temp_dir().join("oxccl-absent-dir/kernels.co");
        let e = CodeObject::from_file(&path).expect_err("no such file");
        assert!(e.to_string().contains(CODE_OBJECT_ENV), "{e}");
        assert!(e.to_string().contains("kernels.co"), "{e}");
        let empty = std::env::temp_dir().join(format!("oxccl-co-empty-{}", std::process::id()));
        std::fs::write(&empty, b"").unwrap();
        let e = CodeObject::from_file(&empty).expect_err("empty");
        let _ = std::fs::remove_file(&empty);
        assert!(e.to_string().contains("empty"), "{e}");
    }

    #[test]
    fn the_embedded_code_object_is_the_default() {
        let co = CodeObject::embedded();
        assert_eq!(co.available(), kernels::kernels_built());
        assert!(co.describe().starts_with("the embedded"));
    }
}
