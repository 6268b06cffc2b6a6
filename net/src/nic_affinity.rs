//! Which network devices a GPU's channels use: the ones nearest it on the PCI tree, as NCCL
//! picks a GPU's local NICs.
//!
//! A machine with a NIC per GPU (or per pair of GPUs) reaches full bandwidth only if every GPU
//! sends through the NICs beside it: one NIC for all GPUs would carry everything through one
//! port and across the host bridges. From the `/sys/devices/...` paths of the GPU and of each
//! device (the plugin's `pciPath`), the distance is classed as NCCL classes it ([`PathKind`]:
//! one PCI switch between them, several, the CPU's host bridge, or another CPU), and a GPU's
//! channels take turns over the devices of the nearest class with the highest speed, starting
//! at the GPU's index among the ranks of its machine, so that GPUs sharing NICs spread over
//! them. Devices without a PCI path (virtual NICs, loopback) count as farthest.
//!
//! **Not built**: NCCL's rail alignment across hosts (`NCCL_CROSS_NIC`): each side picks its
//! own device per channel, so a channel may leave one host on NIC 0 and arrive at the next on
//! NIC 1, which a fat-tree fabric carries and a rail-only one may not.

use super::{PTR_HOST, Properties};
use std::path::{Path, PathBuf};

/// How far a device is from a GPU on the PCI tree, nearest first (NCCL's path types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathKind {
    /// At most one PCI bridge between them.
    Pix,
    /// Several PCI bridges, below one root port.
    Pxb,
    /// Through the CPU's PCI host bridge.
    Phb,
    /// Across the interconnect between CPUs (another NUMA node).
    Sys,
    /// No PCI path known for one of them.
    Unknown,
}

impl PathKind {
    /// NCCL's name of the kind (`PIX`, `PXB`, `PHB`, `SYS`), as its logs and
    /// `NCCL_NET_GDR_LEVEL` spell them.
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Pix => "PIX",
            PathKind::Pxb => "PXB",
            PathKind::Phb => "PHB",
            PathKind::Sys => "SYS",
            PathKind::Unknown => "unknown (no PCI path)",
        }
    }
}

/// The distance of a device from a GPU: the kind of path, then the bridges on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Distance {
    /// The kind of path.
    pub kind: PathKind,
    /// PCI bridges between the two (0 when unknown).
    pub bridges: usize,
}

/// The components of a `/sys/devices/pciDDDD:BB/...` path from the root bus on.
fn components(path: &str) -> Option<Vec<&str>> {
    let rest = path.trim_end_matches('/');
    let at = rest.find("/pci")?;
    let parts: Vec<&str> = rest[at + 1..]
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    (parts.len() >= 2).then_some(parts)
}

/// How far the device at `nic` is from the GPU at `gpu` (both `/sys/devices/...` paths);
/// `numa` gives the NUMA node of a path when the machine says (`None`: unknown).
pub fn distance(gpu: &str, nic: &str, numa: &dyn Fn(&str) -> Option<i32>) -> Distance {
    let (Some(g), Some(n)) = (components(gpu), components(nic)) else {
        return Distance {
            kind: PathKind::Unknown,
            bridges: 0,
        };
    };
    let common = g.iter().zip(&n).take_while(|(a, b)| a == b).count();
    if common == 0 {
        // Different root buses: through the host bridges, and between CPUs where the NUMA
        // nodes differ.
        let other_cpu = matches!((numa(gpu), numa(nic)), (Some(a), Some(b)) if a != b);
        let kind = if other_cpu {
            PathKind::Sys
        } else {
            PathKind::Phb
        };
        return Distance {
            kind,
            bridges: g.len() + n.len() - 2,
        };
    }
    // Bridges below the common ancestor on each side, and the ancestor itself when it is a
    // bridge rather than the root bus.
    let bridges = (g.len() - 1 - common.min(g.len() - 1)) + (n.len() - 1 - common.min(n.len() - 1));
    let kind = if common == 1 {
        PathKind::Phb
    } else if bridges <= 1 {
        PathKind::Pix
    } else {
        PathKind::Pxb
    };
    Distance {
        kind,
        bridges: bridges + usize::from(common > 1),
    }
}

/// The kind of path from the GPU at `gpu` to device `dev` ([`PathKind::Unknown`] when the
/// device has no PCI path).
pub fn path_kind(gpu: &str, dev: &Properties, numa: &dyn Fn(&str) -> Option<i32>) -> PathKind {
    dev.pci_path
        .as_deref()
        .map_or(PathKind::Unknown, |p| distance(gpu, p, numa).kind)
}

/// The devices a GPU's channels take turns over, in the order channels take them: of those
/// the proxy can drive (host memory, at least one receive buffer: what a plugin's device 0
/// must offer), the nearest ones ([`distance`]) of the highest speed, rotated by `local_index`
/// (the GPU's rank among the ranks of its machine). With no GPU path every device is as near as
/// any other. Empty when no device qualifies.
pub fn local_devices(
    gpu: Option<&str>,
    devices: &[Properties],
    local_index: usize,
    numa: &dyn Fn(&str) -> Option<i32>,
) -> Vec<usize> {
    let usable: Vec<usize> = (0..devices.len())
        .filter(|&i| devices[i].ptr_support & PTR_HOST != 0 && devices[i].max_recvs >= 1)
        .collect();
    if usable.is_empty() {
        return Vec::new();
    }
    let far = Distance {
        kind: PathKind::Unknown,
        bridges: 0,
    };
    let dist = |i: usize| match (gpu, devices[i].pci_path.as_deref()) {
        (Some(g), Some(p)) => distance(g, p, numa),
        _ => far,
    };
    let best = usable.iter().map(|&i| dist(i)).min().expect("a device");
    let near: Vec<usize> = usable.into_iter().filter(|&i| dist(i) == best).collect();
    let top = near
        .iter()
        .map(|&i| devices[i].speed_mbps)
        .max()
        .expect("a device");
    let mut chosen: Vec<usize> = near
        .into_iter()
        .filter(|&i| devices[i].speed_mbps == top)
        .collect();
    let k = local_index % chosen.len();
    chosen.rotate_left(k);
    chosen
}

/// The `/sys/devices/...` path of the PCI device with bus id `bus_id` (`DDDD:BB:DD.F`, any
/// case, the domain of 4 or 8 hex digits), when `/sys` has it.
pub fn sysfs_path_of_bus_id(bus_id: &str) -> Option<PathBuf> {
    let id = bus_id.trim().trim_end_matches('\0').to_ascii_lowercase();
    let (domain, rest) = id.split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let link = Path::new("/sys/bus/pci/devices").join(format!("{domain:04x}:{rest}"));
    std::fs::canonicalize(link).ok()
}

/// The NUMA node `/sys` gives for the PCI device at `path` (`None`: unknown or -1).
pub fn sysfs_numa_node(path: &str) -> Option<i32> {
    let v = std::fs::read_to_string(Path::new(path).join("numa_node")).ok()?;
    v.trim().parse().ok().filter(|&n: &i32| n >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SW: &str = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";

    fn no_numa(_: &str) -> Option<i32> {
        None
    }

    fn dev(path: Option<&str>, speed: i32) -> Properties {
        Properties {
            name: path.unwrap_or("virtual").to_string(),
            pci_path: path.map(str::to_string),
            guid: 0,
            ptr_support: 1,
            speed_mbps: speed,
            port: 1,
            latency_us: 0.0,
            max_comms: 1024,
            max_recvs: 1,
            max_p2p_bytes: 1 << 30,
        }
    }

    #[test]
    fn paths_are_classed_as_nccl_classes_them() {
        // GPU behind a switch: root port 00:01.0, switch up 01:00.0, down 02:08.0.
        let gpu = format!("{SW}/0000:02:08.0/0000:03:00.0");
        let d = |nic: &str| distance(&gpu, nic, &no_numa);
        // A NIC beside it under the same downstream port.
        assert_eq!(
            d(&format!("{SW}/0000:02:08.0/0000:03:00.1")).kind,
            PathKind::Pix
        );
        // Under another downstream port of the same switch.
        let pxb = d(&format!("{SW}/0000:02:10.0/0000:04:00.0"));
        assert_eq!(pxb.kind, PathKind::Pxb);
        // Under another root port of the same root bus.
        let phb = d("/sys/devices/pci0000:00/0000:00:02.0/0000:05:00.0");
        assert_eq!(phb.kind, PathKind::Phb);
        // On another root bus: the host bridge, or the other CPU where NUMA says so.
        let other = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0";
        assert_eq!(d(other).kind, PathKind::Phb);
        let numa = |p: &str| Some(if p.contains("pci0000:80") { 1 } else { 0 });
        assert_eq!(distance(&gpu, other, &numa).kind, PathKind::Sys);
        // Not a PCI path at all.
        assert_eq!(d("/sys/devices/virtual/net/lo").kind, PathKind::Unknown);
        assert!(d(&format!("{SW}/0000:02:08.0/0000:03:00.1")) < pxb && pxb < phb);
    }

    #[test]
    fn a_gpus_channels_take_the_nearest_fastest_devices_in_turn() {
        let gpu = format!("{SW}/0000:02:08.0/0000:03:00.0");
        let near = format!("{SW}/0000:02:08.0/0000:03:00.1");
        let near_slow = format!("{SW}/0000:02:08.0/0000:03:00.2");
        let far = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0";
        let devs = [
            dev(Some(far), 400_000),
            dev(Some(&near), 400_000),
            dev(None, 400_000),
            dev(Some(&near_slow), 100_000),
            dev(Some(&near), 400_000),
        ];
        let pick = |i| local_devices(Some(&gpu), &devs, i, &no_numa);
        assert_eq!(pick(0), [1, 4]);
        // The next GPU of the machine starts on the other one.
        assert_eq!(pick(1), [4, 1]);
        // Without a GPU path, every device qualifies (the fastest, in order).
        assert_eq!(local_devices(None, &devs, 0, &no_numa), [0, 1, 2, 4]);
        // Without device paths likewise.
        let virt = [dev(None, 1), dev(None, 1)];
        assert_eq!(local_devices(Some(&gpu), &virt, 1, &no_numa), [1, 0]);
        assert!(local_devices(Some(&gpu), &[], 0, &no_numa).is_empty());
        // A device the proxy cannot drive is never taken, however near.
        let mut gpu_only = dev(Some(&near), 400_000);
        gpu_only.ptr_support = 2;
        let mut no_recv = dev(Some(&near), 400_000);
        no_recv.max_recvs = 0;
        let mixed = [gpu_only, no_recv, dev(Some(far), 400_000)];
        assert_eq!(local_devices(Some(&gpu), &mixed, 0, &no_numa), [2]);
        assert!(local_devices(Some(&gpu), &mixed[..2], 0, &no_numa).is_empty());
    }

    #[test]
    fn bus_ids_name_sysfs_devices_in_any_spelling() {
        // Whatever this machine has: its first PCI device, spelled as CUDA spells bus ids.
        let Some(first) = std::fs::read_dir("/sys/bus/pci/devices")
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
        else {
            return;
        };
        let id = first.file_name().to_string_lossy().to_string();
        let want = std::fs::canonicalize(first.path()).unwrap();
        let cuda = format!("0000{}", id.to_ascii_uppercase());
        assert_eq!(sysfs_path_of_bus_id(&cuda), Some(want.clone()));
        assert_eq!(sysfs_path_of_bus_id(&id), Some(want));
        assert_eq!(sysfs_path_of_bus_id("zz:00:00.0"), None);
    }
}
