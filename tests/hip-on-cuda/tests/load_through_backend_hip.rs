//! The built `libamdhip64.so` opened through backend-hip's own loader (`Hip::load_from`), as
//! `OXCCL_HIP_RUNTIME` opens it. On a machine without libcuda (CI) loading must end in an
//! ordinary "no HIP device" error that names the missing driver, not a crash; with a driver but
//! no GPU in "no HIP device"; with a GPU it loads and counts the devices.

use oxccl_hip::runtime::{self, Hip};
use std::path::PathBuf;

/// The shim cargo built for this test run: `target/<profile>/libamdhip64.so` (the test binary
/// runs from `target/<profile>/deps/`, where cargo also leaves the library).
fn built_shim() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps directory");
    let candidates = [
        deps.join("libamdhip64.so"),
        deps.parent()
            .expect("profile directory")
            .join("libamdhip64.so"),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| panic!("libamdhip64.so not built next to {}", exe.display()))
}

#[test]
fn backend_hip_loads_the_shim_or_reports_no_device() {
    let shim = built_shim();
    // SAFETY: only tries to open the driver's library names; nothing is called.
    let driver_present = unsafe { cudarc::driver::sys::is_culib_present() };
    match Hip::load_from(std::slice::from_ref(&shim)) {
        Ok(hip) => {
            assert!(driver_present, "loaded without a CUDA driver?");
            assert!(hip.device_count > 0);
            assert_eq!(hip.path, shim);
            assert!(hip.is_rocm6(), "the shim announces HIP 6");
            eprintln!("a GPU is present: {hip:?}");
        }
        Err(e) => {
            let s = e.to_string();
            assert!(s.contains(runtime::NO_DEVICE), "{s}");
            assert!(
                !s.contains(runtime::NO_RUNTIME),
                "the shim itself must load: {s}"
            );
            if !driver_present {
                assert!(s.contains("hipErrorNoDevice"), "{s}");
                assert!(s.contains("libcuda"), "{s}");
            }
            eprintln!("{s}");
        }
    }
}

/// The entry points `Hip::has` lists in backend-hip/src/runtime.rs (read from the source, so the
/// list has one home).
fn entry_points_backend_hip_loads() -> Vec<String> {
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../backend-hip/src/runtime.rs");
    let text = std::fs::read_to_string(&src).expect("backend-hip's runtime.rs");
    let start = text.find("fields!(").expect("the fields! list in Hip::has") + "fields!(".len();
    let end = start + text[start..].find(')').expect("end of the list");
    text[start..end]
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

#[test]
fn every_entry_point_backend_hip_loads_is_exported() {
    let shim = built_shim();
    let names = entry_points_backend_hip_loads();
    assert!(names.len() >= 40, "{names:?}");
    // SAFETY: opening the shim runs no initialiser beyond Rust's own.
    let lib = unsafe { libloading::Library::new(&shim) }.expect("open the shim");
    for name in &names {
        // SAFETY: only the symbol's presence is checked; it is not called.
        let sym = unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) };
        assert!(sym.is_ok(), "{name} is not exported by {}", shim.display());
    }
}

/// The HIP numbers this runtime maps by value are the ones backend-hip's bindings pass.
#[test]
fn mapped_values_match_the_bindings() {
    use amdhip64::device_api::ATTR_MULTIPROCESSOR_COUNT;
    use oxccl_hip::sys;
    assert_eq!(
        ATTR_MULTIPROCESSOR_COUNT,
        sys::hipDeviceAttribute_t::hipDeviceAttributeMultiprocessorCount.0
    );
    assert_eq!(sys::hipStreamCaptureMode::hipStreamCaptureModeGlobal.0, 0);
    assert_eq!(
        sys::hipStreamCaptureMode::hipStreamCaptureModeThreadLocal.0,
        1
    );
    assert_eq!(sys::hipStreamCaptureMode::hipStreamCaptureModeRelaxed.0, 2);
    // hipHostRegister's flags are passed to cuMemHostRegister as they are.
    assert_eq!(sys::hipHostRegisterPortable, 1);
    assert_eq!(sys::hipHostRegisterMapped, 2);
}
