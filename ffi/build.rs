//! Sets the shared library's soname for the flavour being built.

fn main() {
    let rccl = std::env::var_os("CARGO_FEATURE_RCCL").is_some();
    let soname = if rccl { "librccl.so.1" } else { "libnccl.so.2" };
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    }
    println!("cargo::rerun-if-changed=build.rs");
}
