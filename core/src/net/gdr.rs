//! GPUDirect RDMA (GDR) for NET connections: whether a FIFO's slots live in GPU memory that the
//! network reads and writes itself, how they are registered, and whether receives need a flush.
//!
//! Each side decides for its own FIFOs, as NCCL does: a send FIFO's slots go to GPU memory when
//! the network can read GPU memory, the GPU supports GPUDirect RDMA and the user allows it
//! (`NCCL_NET_GDR_LEVEL`, and `NCCL_NET_GDR_READ` for sends); a receive FIFO's likewise. Head,
//! tail and the per-slot sizes stay in mapped host memory either way: the proxy polls them.
//! The environment is read in one place ([`GdrEnv::from_env`]); everything below it takes the
//! choice as values, so tests need no environment.

use super::{PTR_CUDA, PTR_DMABUF, Properties};
use std::os::fd::OwnedFd;

/// What the user asked of GDR through NCCL's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GdrEnv {
    /// `NCCL_NET_GDR_LEVEL=LOC` (or `0`): no GDR at all. Other levels name PCI distances, which
    /// oxccl does not measure: they allow GDR.
    pub disabled: bool,
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
        GdrEnv::parse(|k| std::env::var(k).ok())
    }

    /// The variables as `get` returns them (`None`: unset).
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> GdrEnv {
        let is = |k: &str, v: &str| get(k).is_some_and(|x| x.trim().eq_ignore_ascii_case(v));
        GdrEnv {
            disabled: is("NCCL_NET_GDR_LEVEL", "LOC") || is("NCCL_NET_GDR_LEVEL", "0"),
            no_read: is("NCCL_NET_GDR_READ", "0"),
            no_dma_buf: is("NCCL_DMABUF_ENABLE", "0"),
            force_flush: is("NCCL_NET_FORCE_FLUSH", "1"),
        }
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
    let on = net_reads_gpu && gpu.rdma && !env.disabled;
    NetGdr {
        send: on && !env.no_read,
        recv: on,
        dma_buf: on && dma_buf,
        flush: on && flush_needed(force_flush, gpu.compute_capability, env),
    }
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
    std::sync::Arc<dyn Fn() -> crate::error::Result<Box<dyn std::any::Any>> + Send + Sync>;

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
    use crate::net::PTR_HOST;

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
        for level in ["PXB", "SYS", "5", ""] {
            assert!(!env(&[("NCCL_NET_GDR_LEVEL", level)]).disabled, "{level}");
        }
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
