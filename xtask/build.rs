//! Passes the target triple on, so the library can configure a C compiler for tests.

fn main() {
    for var in ["TARGET", "HOST"] {
        if let Ok(v) = std::env::var(var) {
            println!("cargo::rustc-env=XTASK_BUILD_{var}={v}");
        }
    }
    println!("cargo::rerun-if-changed=build.rs");
}
