//! `cargo xtask install --prefix DIR [--rccl] [--debug]`: builds and installs oxccl's C library.
//! `cargo xtask headers [--check]`: generates include/nccl.h and include/rccl/rccl.h from
//! include/api.h.in (or checks that they match it).

use std::path::PathBuf;
use std::process::ExitCode;
use xtask::{Flavour, Profile, install};

const USAGE: &str = "usage: cargo xtask install --prefix DIR [--rccl] [--debug]
       cargo xtask headers [--check]

install:
  --prefix DIR   install into DIR/lib and DIR/include (created if missing)
  --rccl         build librccl.so.1 with rccl/rccl.h instead of libnccl.so.2 with nccl.h
  --debug        build with the dev profile instead of release
headers: write include/nccl.h and include/rccl/rccl.h from include/api.h.in
  --check        change nothing; fail if either header differs from the template's";

/// `cargo xtask headers [--check]`.
fn headers(args: &[String]) -> ExitCode {
    let check = match args {
        [] => false,
        [a] if a == "--check" => true,
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = if check {
        xtask::headers::stale_headers()
    } else {
        xtask::headers::write_headers()
    };
    match result {
        Ok(files) if files.is_empty() => {
            println!("headers match {}", xtask::headers::TEMPLATE);
            ExitCode::SUCCESS
        }
        Ok(files) => {
            for f in &files {
                let what = if check {
                    "differs from the template"
                } else {
                    "written"
                };
                println!("{}: {what}", f.display());
            }
            if check {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("xtask headers failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("headers") {
        return headers(&args[1..]);
    }
    let mut it = args.iter();
    if it.next().map(String::as_str) != Some("install") {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    let mut prefix: Option<PathBuf> = None;
    let mut flavour = Flavour::Nccl;
    let mut profile = Profile::Release;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--prefix" => prefix = it.next().map(PathBuf::from),
            "--rccl" => flavour = Flavour::Rccl,
            "--nccl" => flavour = Flavour::Nccl,
            "--debug" => profile = Profile::Debug,
            "--release" => profile = Profile::Release,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(prefix) = prefix else {
        eprintln!("--prefix is required\n{USAGE}");
        return ExitCode::from(2);
    };
    let prefix = std::path::absolute(&prefix).unwrap_or(prefix);
    match install(&prefix, flavour, profile) {
        Ok(i) => {
            println!("installed {}", i.library.display());
            println!(
                "  {} -> {}, {} -> {}",
                flavour.soname(),
                flavour.file_name(),
                flavour.link_name(),
                flavour.soname()
            );
            println!("  {}", i.include_dir.join(flavour.header()).display());
            let (umbrella, folder) = flavour.device_headers();
            println!(
                "  {}, {}/",
                i.include_dir.join(umbrella).display(),
                i.include_dir.join(folder).display()
            );
            println!(
                "link with: -I{} -L{} {}  (run with LD_LIBRARY_PATH={})",
                i.include_dir.display(),
                i.lib_dir.display(),
                flavour.lib_flag(),
                i.lib_dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask install failed: {e}");
            ExitCode::FAILURE
        }
    }
}
