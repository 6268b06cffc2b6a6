//! GPUDirect RDMA (GDR) for NET connections: whether a FIFO's slots live in GPU memory that the
//! network reads and writes itself, how they are registered, and whether receives need a flush.
//!
//! Each side decides for its own FIFOs, as NCCL does: a send FIFO's slots go to GPU memory when
//! the network can read GPU memory, the GPU supports GPUDirect RDMA and the user allows it
//! (`NCCL_NET_GDR_LEVEL`, and `NCCL_NET_GDR_READ` for sends); a receive FIFO's likewise. Head,
//! tail and the per-slot sizes stay in mapped host memory either way: the proxy polls them.
//! The environment is read in one place ([`GdrEnv::from_env`]); everything below it takes the
//! choice as values, so tests need no environment.

use super::nic_affinity::PathKind;
use super::{PTR_CUDA, PTR_DMABUF, Properties};
use oxccl_core::config::{self, Env, vars};
use std::os::fd::OwnedFd;

/// What the user asked of GDR through NCCL's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GdrEnv {
    /// `NCCL_NET_GDR_LEVEL=LOC` (or `0`), or a level nearer than any PCI path (`NVL`, `NVB`,
    /// `C2C`): no GDR at all.
    pub disabled: bool,
    /// The farthest PCI path between the GPU and a network device that GDR may cross
    /// (`NCCL_NET_GDR_LEVEL`: `PIX` or 1, `PXB` or 2 (the default, as NCCL's), `P2C` and `PXN`
    /// as `PXB`, `PHB` or 3, `SYS` or 4 and above).
    pub max_path: PathKind,
    /// `NCCL_NET_GDR_READ=0`: no GDR for send FIFOs (the network would read GPU memory).
    pub no_read: bool,
    /// `NCCL_DMABUF_ENABLE=0`: register GPU memory with `regMr`, never through a dma-buf.
    pub no_dma_buf: bool,
    /// `NCCL_NET_FORCE_FLUSH=1`: flush every GDR receive, whatever the GPU.
    pub force_flush: bool,
}

impl GdrEnv {
    /// The variables of this process.
    pub fn from_env() -> GdrEnv {
        GdrEnv::from(Env::PROCESS)
    }

    /// The variables as `get` returns them (`None`: unset).
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> GdrEnv {
        GdrEnv::from(Env::from_fn(&get))
    }

    fn from(env: Env<'_>) -> GdrEnv {
        let level = env
            .get(&vars::NCCL_NET_GDR_LEVEL)
            .map(|v| v.trim().to_ascii_uppercase());
        let (disabled, max_path) = match level.as_deref() {
            None | Some("") => (false, PathKind::Pxb),
            Some("LOC" | "0" | "NVL" | "NVB" | "C2C") => (true, PathKind::Pxb),
            Some("PIX" | "1") => (false, PathKind::Pix),
            Some("PXB" | "2" | "P2C" | "PXN") => (false, PathKind::Pxb),
            Some("PHB" | "3") => (false, PathKind::Phb),
            Some("SYS") => (false, PathKind::Sys),
            Some(n) if n.parse::<u32>().is_ok_and(|n| n >= 4) => (false, PathKind::Sys),
            Some(other) => {
                config::bad_value(
                    vars::NCCL_NET_GDR_LEVEL.name,
                    other,
                    "a level NCCL knows (LOC, PIX, PXB, PHB, SYS, or a number)",
                    "PXB",
                );
                (false, PathKind::Pxb)
            }
        };
        GdrEnv {
            disabled,
            max_path,
            no_read: !env.get(&vars::NCCL_NET_GDR_READ),
            no_dma_buf: !env.get(&vars::NCCL_DMABUF_ENABLE),
            force_flush: env.get(&vars::NCCL_NET_FORCE_FLUSH),
        }
    }
}

impl Default for GdrEnv {
    fn default() -> GdrEnv {
        GdrEnv::parse(|_| None)
    }
}

/// What the GPU of a communicator offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuCaps {
    /// The GPU supports GPUDirect RDMA.
    pub rdma: bool,
    /// The driver exports GPU memory as dma-buf file descriptors.
    pub dma_buf: bool,
    /// Compute capability (major, minor), when the runtime reports one.
    pub compute_capability: Option<(u32, u32)>,
    /// The farthest PCI path from the GPU to the network devices its connections use
    /// ([`super::nic_affinity::distance`]); `None` when the GPU's own place is unknown, which leaves
    /// `NCCL_NET_GDR_LEVEL`'s distance unchecked. A device without a PCI path counts as
    /// attached to the CPU: past `PHB`, within `SYS`.
    pub path: Option<PathKind>,
}

/// How one communicator's NET FIFOs use GPU memory: the outcome of [`decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NetGdr {
    /// Send FIFOs keep their slots in GPU memory.
    pub send: bool,
    /// Receive FIFOs keep their slots in GPU memory.
    pub recv: bool,
    /// GPU slots are registered through a dma-buf (`regMrDmaBuf`), else with `regMr` as
    /// `NCCL_PTR_CUDA`.
    pub dma_buf: bool,
    /// Every GDR receive with bytes is flushed (`iflush`) before the kernel may read it.
    pub flush: bool,
}

/// Decides GDR for a network device with `props` (its `force_flush` apart) on a GPU with `gpu`.
pub fn decide(props: &Properties, force_flush: bool, gpu: GpuCaps, env: GdrEnv) -> NetGdr {
    let dma_buf = props.ptr_support & PTR_DMABUF != 0 && gpu.dma_buf && !env.no_dma_buf;
    let net_reads_gpu = props.ptr_support & PTR_CUDA != 0 || dma_buf;
    let near = gpu.path.is_none_or(|p| within(p, env.max_path));
    let on = net_reads_gpu && gpu.rdma && !env.disabled && near;
    NetGdr {
        send: on && !env.no_read,
        recv: on,
        dma_buf: on && dma_buf,
        flush: on && flush_needed(force_flush, gpu.compute_capability, env),
    }
}

/// Whether a path of kind `path` is no farther than `max` (an unknown path counts as `Sys`).
pub fn within(path: PathKind, max: PathKind) -> bool {
    let path = if path == PathKind::Unknown {
        PathKind::Sys
    } else {
        path
    };
    path <= max
}

/// Whether data the network wrote into GPU memory must be flushed before the GPU reads it:
/// below compute capability 9.0 (an unknown one counts as below: a flush is never wrong), or
/// when the device or the user forces it.
fn flush_needed(force_flush: bool, cc: Option<(u32, u32)>, env: GdrEnv) -> bool {
    force_flush || env.force_flush || cc.is_none_or(|(major, _)| major < 9)
}

/// Exports GPU memory `(address, bytes)` as a dma-buf file descriptor, `None` when the driver
/// cannot (the registration then falls back to `regMr`).
pub type DmaBufExport<'a> = &'a dyn Fn(*mut u8, usize) -> Option<OwnedFd>;

/// Makes the communicator's GPU current on the calling thread until what it returns is dropped.
pub type GpuBinding =
    std::sync::Arc<dyn Fn() -> oxccl_core::error::Result<Box<dyn std::any::Any>> + Send + Sync>;

/// What the proxy needs of the GPU: for FIFOs whose slots are in GPU memory, and for its
/// threads.
#[derive(Clone, Copy, Default)]
pub struct GpuRegistration<'a> {
    /// Flush every GDR receive with bytes before advancing `tail`.
    pub flush: bool,
    /// Registers GPU slots through a dma-buf from this export (`None`: `regMr` as `PTR_CUDA`).
    pub dma_buf: Option<DmaBufExport<'a>>,
    /// Run by each proxy thread as it starts: the network's calls then find the GPU current,
    /// as they do under NCCL, whose proxy threads set the communicator's device (plugins that
    /// touch GPU memory may call the CUDA runtime from `isend`, `test` or `iflush`).
    pub bind: Option<&'a GpuBinding>,
}

impl std::fmt::Debug for GpuRegistration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuRegistration")
            .field("flush", &self.flush)
            .field("dma_buf", &self.dma_buf.is_some())
            .field("bind", &self.bind.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PTR_HOST;

    fn props(ptr_support: u32) -> Properties {
        Properties {
            name: "x".into(),
            pci_path: None,
            guid: 0,
            ptr_support,
            speed_mbps: 1,
            port: 0,
            latency_us: 0.0,
            max_comms: 1,
            max_recvs: 1,
            max_p2p_bytes: 1,
        }
    }

    const HOPPER: GpuCaps = GpuCaps {
        rdma: true,
        dma_buf: true,
        compute_capability: Some((9, 0)),
        path: Some(PathKind::Pix),
    };

    fn env(vars: &[(&str, &str)]) -> GdrEnv {
        GdrEnv::parse(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn gdr_env_reads_nccls_variables() {
        assert_eq!(env(&[]), GdrEnv::default());
        assert!(env(&[("NCCL_NET_GDR_LEVEL", "loc")]).disabled);
        assert!(env(&[("NCCL_NET_GDR_LEVEL", " 0 ")]).disabled);
        assert!(env(&[("NCCL_NET_GDR_LEVEL", "NVL")]).disabled);
        for (level, max) in [
            ("", PathKind::Pxb),
            ("pix", PathKind::Pix),
            ("1", PathKind::Pix),
            ("PXB", PathKind::Pxb),
            ("PXN", PathKind::Pxb),
            ("3", PathKind::Phb),
            ("PHB", PathKind::Phb),
            ("SYS", PathKind::Sys),
            ("5", PathKind::Sys),
            ("bogus", PathKind::Pxb),
        ] {
            let e = env(&[("NCCL_NET_GDR_LEVEL", level)]);
            assert!(!e.disabled && e.max_path == max, "{level}: {e:?}");
        }
        assert_eq!(GdrEnv::default().max_path, PathKind::Pxb);
        assert!(env(&[("NCCL_NET_GDR_READ", "0")]).no_read);
        assert!(!env(&[("NCCL_NET_GDR_READ", "1")]).no_read);
        assert!(env(&[("NCCL_DMABUF_ENABLE", "0")]).no_dma_buf);
        assert!(env(&[("NCCL_NET_FORCE_FLUSH", "1")]).force_flush);
        assert!(!env(&[("NCCL_NET_FORCE_FLUSH", "0")]).force_flush);
    }

    #[test]
    fn gdr_needs_the_network_the_gpu_and_the_user() {
        let all = PTR_HOST | PTR_CUDA;
        let on = decide(&props(all), false, HOPPER, GdrEnv::default());
        assert_eq!(
            on,
            NetGdr {
                send: true,
                recv: true,
                dma_buf: false,
                flush: false
            }
        );
        assert_eq!(
            decide(&props(PTR_HOST), true, HOPPER, GdrEnv::default()),
            NetGdr::default(),
            "a host-only network"
        );
        let no_rdma = GpuCaps {
            rdma: false,
            ..HOPPER
        };
        assert_eq!(
            decide(&props(all), false, no_rdma, GdrEnv::default()),
            NetGdr::default()
        );
        let off = env(&[("NCCL_NET_GDR_LEVEL", "LOC")]);
        assert_eq!(decide(&props(all), false, HOPPER, off), NetGdr::default());
        // The device's distance from the GPU against NCCL_NET_GDR_LEVEL (default PXB).
        let at = |path| GpuCaps {
            path: Some(path),
            ..HOPPER
        };
        let dflt = GdrEnv::default();
        assert!(decide(&props(all), false, at(PathKind::Pxb), dflt).recv);
        assert_eq!(
            decide(&props(all), false, at(PathKind::Phb), dflt),
            NetGdr::default()
        );
        assert_eq!(
            decide(&props(all), false, at(PathKind::Unknown), dflt),
            NetGdr::default()
        );
        let phb = env(&[("NCCL_NET_GDR_LEVEL", "PHB")]);
        assert!(decide(&props(all), false, at(PathKind::Phb), phb).recv);
        assert!(!decide(&props(all), false, at(PathKind::Sys), phb).recv);
        let sys = env(&[("NCCL_NET_GDR_LEVEL", "SYS")]);
        assert!(decide(&props(all), false, at(PathKind::Unknown), sys).recv);
        let pix = env(&[("NCCL_NET_GDR_LEVEL", "PIX")]);
        assert!(!decide(&props(all), false, at(PathKind::Pxb), pix).recv);
        // Where the GPU's own place is unknown, the distance is not checked.
        let nowhere = GpuCaps {
            path: None,
            ..HOPPER
        };
        assert!(decide(&props(all), false, nowhere, dflt).recv);
        let no_read = env(&[("NCCL_NET_GDR_READ", "0")]);
        let d = decide(&props(all), false, HOPPER, no_read);
        assert!(!d.send && d.recv, "{d:?}");
    }

    #[test]
    fn dma_buf_needs_the_bit_the_driver_and_the_user() {
        let bits = PTR_HOST | PTR_DMABUF;
        let d = decide(&props(bits), false, HOPPER, GdrEnv::default());
        assert!(
            d.send && d.recv && d.dma_buf,
            "dma-buf alone makes a network GDR: {d:?}"
        );
        let no_driver = GpuCaps {
            dma_buf: false,
            ..HOPPER
        };
        assert_eq!(
            decide(&props(bits), false, no_driver, GdrEnv::default()),
            NetGdr::default()
        );
        let d = decide(
            &props(bits | PTR_CUDA),
            false,
            HOPPER,
            env(&[("NCCL_DMABUF_ENABLE", "0")]),
        );
        assert!(d.recv && !d.dma_buf, "regMr instead: {d:?}");
    }

    #[test]
    fn receives_flush_below_hopper_or_when_forced() {
        let all = PTR_HOST | PTR_CUDA;
        let ampere = GpuCaps {
            compute_capability: Some((8, 0)),
            ..HOPPER
        };
        let unknown = GpuCaps {
            compute_capability: None,
            ..HOPPER
        };
        let none = GdrEnv::default();
        assert!(decide(&props(all), false, ampere, none).flush);
        assert!(decide(&props(all), false, unknown, none).flush);
        assert!(!decide(&props(all), false, HOPPER, none).flush);
        assert!(decide(&props(all), true, HOPPER, none).flush, "forceFlush");
        let forced = env(&[("NCCL_NET_FORCE_FLUSH", "1")]);
        assert!(decide(&props(all), false, HOPPER, forced).flush);
        assert!(
            !decide(&props(PTR_HOST), true, ampere, forced).flush,
            "no GDR, no flush"
        );
    }
}
