//! Ranks on separate "machines": each rank's process runs in a network namespace of its own
//! (its own interface and address on a bridge) and a UTS namespace with its own host name, so
//! its host hash differs from the others' without `NCCL_HOSTID`, and every byte between ranks
//! crosses a (virtual) network. The host backend then runs the matrix with rings, trees and
//! direct plans, with each namespace's ranks numbered together and round robin.
//!
//! Needs root and `ip` (iproute2) and `unshare` (util-linux): where the machine does not allow
//! network namespaces the test says so and passes without running.

use oxccl_core::bootstrap::{BootstrapOptions, UniqueId};
use oxccl_tests::harness::id_to_hex;
use std::process::{Command, Stdio};

/// Runs `ip` with `args`; the error names the command.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A bridge in this namespace and `n` namespaces wired to it, removed on drop.
struct Machines {
    tag: u32,
    subnet: u32,
    n: usize,
}

impl Machines {
    fn bridge(&self) -> String {
        format!("oxb{}", self.tag)
    }
    fn ns(&self, i: usize) -> String {
        format!("oxccl-{}-{i}", self.tag)
    }
    /// The interface of machine `i`, inside its namespace.
    fn iface(&self, i: usize) -> String {
        format!("oxc{}x{i}", self.tag)
    }

    fn new(n: usize) -> Result<Machines, String> {
        let tag = std::process::id() % 10_000;
        let m = Machines {
            tag,
            subnet: 20 + tag % 200,
            n: 0,
        };
        let mut m = m;
        let br = m.bridge();
        ip(&["link", "add", &br, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("10.79.{}.254/24", m.subnet),
            "dev",
            &br,
        ])?;
        ip(&["link", "set", &br, "up"])?;
        for i in 0..n {
            let (ns, inner, outer) = (m.ns(i), m.iface(i), format!("oxh{}x{i}", tag));
            ip(&["netns", "add", &ns])?;
            m.n = i + 1;
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ])?;
            ip(&["link", "set", &outer, "master", &br, "up"])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            let addr = format!("10.79.{}.{}/24", m.subnet, i + 1);
            ip(&["-n", &ns, "addr", "add", &addr, "dev", &inner])?;
            ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(m)
    }
}

impl Drop for Machines {
    fn drop(&mut self) {
        for i in 0..self.n {
            let _ = ip(&["netns", "del", &self.ns(i)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}

/// Runs the matrix with `n` ranks, rank r on machine `place(r)`, under `env`.
fn matrix(m: &Machines, n: usize, place: impl Fn(usize) -> usize, env: &[(&str, &str)]) {
    let opts = BootstrapOptions {
        socket_ifname: Some(format!("={}", m.bridge())),
        ..BootstrapOptions::from_env()
    };
    let id = UniqueId::generate(&opts).expect("unique id on the bridge");
    let children: Vec<_> = (0..n)
        .map(|rank| {
            let i = place(rank);
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &m.ns(i), "unshare", "--uts", "sh", "-c"])
                .arg(r#"hostname "$0" && exec "$@""#)
                .arg(format!("oxccl-machine-{i}"))
                .arg(env!("CARGO_BIN_EXE_host-worker"))
                .args(["matrix", &id_to_hex(&id), &n.to_string(), &rank.to_string()])
                .env("NCCL_SOCKET_IFNAME", format!("={}", m.iface(i)))
                .env("NCCL_DEBUG", "INFO")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in env {
                c.env(k, v);
            }
            c.spawn().expect("spawn a worker in its namespace")
        })
        .collect();
    let mut failures = Vec::new();
    let mut logs = String::new();
    for (rank, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().expect("worker output");
        logs.push_str(&String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            failures.push(format!(
                "rank {rank} exited with {}:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout)
            ));
        }
    }
    assert!(failures.is_empty(), "{}\n{logs}", failures.join("\n"));
    let machines = (0..n).map(&place).max().unwrap_or(0) + 1;
    assert!(
        logs.contains(&format!("{n} ranks on {machines} hosts")),
        "the ranks did not see {machines} hosts:\n{logs}"
    );
}

#[test]
fn ranks_in_their_own_network_and_uts_namespaces() {
    let unshare_works = Command::new("unshare")
        .args(["--net", "--uts", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !unshare_works {
        eprintln!("skipped: this machine does not allow network namespaces (needs root)");
        return;
    }
    let m = match Machines::new(4) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("skipped: could not build the namespaces: {e}");
            return;
        }
    };
    let env = |algo| {
        [
            ("OXCCL_TEST_COUNTS", "1,7,1000"),
            ("NCCL_ALGO", algo),
            ("OXCCL_NCHANNELS", "2"),
        ]
    };
    for algo in ["ring", "tree", "direct"] {
        // Every rank its own machine.
        matrix(&m, 4, |r| r, &env(algo));
        // Two machines, ranks round robin: rings and trees reorder them by host.
        matrix(&m, 4, |r| r % 2, &env(algo));
    }
}
