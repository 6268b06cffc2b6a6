//! Runs the safe API's misuse scenarios (`oxccl_tests::misuse`) on the host backend, for a
//! memory checker to watch.
//!
//! ```text
//! safe-misuse [NAME...]     (no name: every scenario; `canary`: a deliberate read of freed memory)
//! ```
//! Exits 0 when every scenario passed, 1 when one panicked, 64 on an unknown name.

use oxccl_tests::misuse::{SCENARIOS, canary_reads_freed_memory};

fn main() {
    let names: Vec<String> = std::env::args().skip(1).collect();
    if names.iter().any(|n| n == "canary") {
        canary_reads_freed_memory();
        return;
    }
    let mut failed = 0;
    for (name, run) in SCENARIOS {
        if !names.is_empty() && !names.iter().any(|n| n == name) {
            continue;
        }
        match std::panic::catch_unwind(run) {
            Ok(()) => println!("ok {name}"),
            Err(_) => {
                println!("FAILED {name}");
                failed += 1;
            }
        }
    }
    if let Some(unknown) = names
        .iter()
        .find(|n| !SCENARIOS.iter().any(|(s, _)| s == n))
    {
        eprintln!("unknown scenario {unknown}");
        std::process::exit(64);
    }
    std::process::exit(i32::from(failed > 0));
}
