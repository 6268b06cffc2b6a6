//! Builds and installs each flavour, compiles `tests/c/abi_test.c` against the installed header
//! and links it with `-lnccl` / `-lrccl` as an `NCCL_HOME=<prefix>` build would, then runs it on
//! the host backend: 4 ranks in processes and in threads, every collective checked, bad
//! arguments, old configs, non-blocking init. It must print "ALL PASS". (The same program runs
//! on GPUs with OXCCL_TEST_GPU=1: tests/gpu/c_test.sh.)

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use xtask::{Flavour, install, profile_of, workspace_root};

/// Longer than the program's own 55 s alarm, so a hang is reported by the program when it can.
const DEADLINE: Duration = Duration::from_secs(90);

fn run_c_test(flavour: Flavour) {
    let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c-abi-{flavour:?}"));
    let inst = install(&prefix, flavour, profile_of(cfg!(debug_assertions))).expect("install");
    let exe = prefix.join("abi_test");
    let mut cc = xtask::c_compiler().to_command();
    cc.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g"])
        .arg(format!("-I{}", inst.include_dir.display()))
        .arg(workspace_root().join("tests/c/abi_test.c"))
        .arg(format!("-L{}", inst.lib_dir.display()))
        .arg(flavour.lib_flag())
        .arg("-lpthread")
        // The program dlopens the CUDA driver in its GPU mode; glibc before 2.34 keeps dlopen
        // in libdl.
        .arg("-ldl")
        .arg("-o")
        .arg(&exe);
    if flavour == Flavour::Rccl {
        cc.arg("-DOXCCL_TEST_RCCL");
    }
    let out = cc.output().expect("run the C compiler");
    assert!(
        out.status.success(),
        "{cc:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The program records the soname, as programs linked against NVIDIA's/AMD's library do.
    let dynamic = Command::new("readelf")
        .arg("-d")
        .arg(&exe)
        .output()
        .unwrap();
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    assert!(
        dynamic.contains(&format!("Shared library: [{}]", flavour.soname())),
        "{dynamic}"
    );

    let mut child = Command::new(&exe)
        .env("OXCCL_BACKEND", "host")
        .env("LD_LIBRARY_PATH", &inst.lib_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the C test");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        status.success() && stdout.lines().any(|l| l == "ALL PASS"),
        "{flavour:?} C ABI test failed ({status}) after {:.1} s:\n{stdout}\n{stderr}",
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn nccl_c_program_passes() {
    run_c_test(Flavour::Nccl);
}

#[test]
fn rccl_c_program_passes() {
    run_c_test(Flavour::Rccl);
}
