//! The communicator: creation (blocking, non-blocking, all devices of a process), split,
//! teardown, and the queries that are not operations.

use crate::device_api::memory::DeviceApi;
use crate::dispatch::{AnyComm, CommOps, RuntimeBackend};
use crate::error::{Error, Result};
use crate::id::UniqueId;
use crate::runtime::{Device, Runtime};
use crate::stream::Stream;
use oxccl_core::comm::SPLIT_NOCOLOR;
use oxccl_core::config::CommConfig;
use std::sync::Mutex;

/// One rank of a group of ranks that run collectives together (`ncclComm_t`).
///
/// Operations are the methods of [`crate::Collectives`]; they run on the communicator's own
/// stream ([`Communicator::stream`]) or on another one through [`Communicator::on`]. Dropping
/// the communicator destroys it (`ncclCommDestroy`); [`Communicator::finalize`] does so and
/// reports errors, [`Communicator::abort`] tears it down at once.
pub struct Communicator {
    pub(crate) comm: AnyComm,
    pub(crate) device: Device,
    pub(crate) stream: Stream,
    /// Windows and device communicators of the device API, made on first use.
    pub(crate) device_api: Mutex<Option<DeviceApi>>,
    /// Held through each device-API collective, so that two threads of one rank cannot
    /// interleave theirs (every rank must meet the others' in one order).
    pub(crate) device_api_order: Mutex<()>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Communicator(rank {} of {}, {} device {})",
            self.rank(),
            self.size(),
            self.device.runtime.name(),
            self.device.ordinal
        )
    }
}

impl Communicator {
    /// Joins as rank `rank` of `nranks` through `id`, on `device` (`ncclCommInitRank`); returns
    /// once every rank has joined.
    pub fn init(
        id: &UniqueId,
        rank: usize,
        nranks: usize,
        device: &Device,
    ) -> Result<Communicator> {
        let comm = start(id, rank, nranks, device, true)?;
        Communicator::wrap(comm, device)
    }

    /// Starts joining like [`Communicator::init`] and returns at once (a non-blocking
    /// `ncclCommInitRankConfig`); poll or wait on the returned handle.
    pub fn init_nonblocking(
        id: &UniqueId,
        rank: usize,
        nranks: usize,
        device: &Device,
    ) -> Result<PendingInit> {
        let comm = start(id, rank, nranks, device, false)?;
        Ok(PendingInit {
            comm: Some(comm),
            device: device.clone(),
        })
    }

    /// One communicator per device, all in this process, rank `i` on `devices[i]`
    /// (`ncclCommInitAll`).
    pub fn init_all(devices: &[Device]) -> Result<Vec<Communicator>> {
        let first = devices
            .first()
            .ok_or_else(|| Error::arg("init_all needs at least one device"))?;
        for (i, d) in devices.iter().enumerate() {
            if !d.runtime.same(&first.runtime) {
                return Err(Error::arg("init_all needs devices of one runtime"));
            }
            if devices[..i].iter().any(|e| e.ordinal == d.ordinal) {
                return Err(Error::arg(format!(
                    "device {} appears twice: one rank per device",
                    d.ordinal
                )));
            }
        }
        let ordinals: Vec<i32> = devices.iter().map(|d| d.ordinal).collect();
        let comms = first.runtime.backend.init_all(&ordinals)?;
        comms
            .into_iter()
            .zip(devices)
            .map(|(c, d)| Communicator::wrap(c, d))
            .collect()
    }

    /// Wraps a ready core communicator and gives it its own stream.
    pub(crate) fn wrap(comm: AnyComm, device: &Device) -> Result<Communicator> {
        let stream = match device.create_stream() {
            Ok(s) => s,
            Err(e) => {
                let _ = comm.destroy();
                return Err(e);
            }
        };
        Ok(Communicator {
            comm,
            device: device.clone(),
            stream,
            device_api: Mutex::new(None),
            device_api_order: Mutex::new(()),
        })
    }

    /// Splits into disjoint communicators (`ncclCommSplit`): ranks passing the same `color`
    /// form one, ordered by `key` (ties by rank). A rank passing `None` joins none and gets
    /// `None`. Every rank must call it.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Communicator>> {
        let color = match color {
            None => SPLIT_NOCOLOR,
            Some(c) => i32::try_from(c)
                .map_err(|_| Error::arg(format!("color {c} does not fit NCCL's int")))?,
        };
        match self.comm.split(color, key, None)? {
            Some(c) => Ok(Some(Communicator::wrap(c, &self.device)?)),
            None => Ok(None),
        }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// Number of ranks (`ncclCommCount`).
    pub fn size(&self) -> usize {
        self.comm.nranks()
    }

    /// The device this rank runs on (`ncclCommCuDevice`).
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.device.runtime
    }

    /// The id it was created from.
    pub fn unique_id(&self) -> UniqueId {
        UniqueId(self.comm.unique_id())
    }

    /// The communicator's own stream, where operations run unless [`Communicator::on`] names
    /// another.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Blocks until every operation queued on the communicator's stream has run; reports an
    /// asynchronous failure of the communicator.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize()?;
        self.async_error()
    }

    /// Whether every operation queued on the communicator's stream has run (never blocks).
    pub fn is_complete(&self) -> Result<bool> {
        self.stream.is_complete()
    }

    /// The first asynchronous failure (a dead peer, a network error, an abort), as
    /// `ncclCommGetAsyncError` reports it; `Ok` while there is none.
    pub fn async_error(&self) -> Result<()> {
        Ok(self.comm.status()?)
    }

    /// A handle that aborts this communicator from any thread, even while another thread is
    /// blocked in one of its operations.
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle(self.comm.clone())
    }

    /// `ncclCommAbort`: stops every wait of this communicator and releases it; returns at once.
    pub fn abort(self) {
        self.comm.abort();
    }

    /// `ncclCommFinalize` then `ncclCommDestroy`: waits for the communicator's stream, and
    /// reports the first failure, which dropping would only log.
    pub fn finalize(self) -> Result<()> {
        let synced = self.synchronize();
        let finalized = self.comm.finalize().map_err(Error::from);
        // Drop destroys it.
        synced.and(finalized)
    }

    /// Checks that no group is open on this thread, for operations issued outside one.
    pub(crate) fn check_no_group() -> Result<()> {
        if oxccl_core::comm::group::group_depth() > 0 {
            return Err(Error::usage(
                "a group is open on this thread: issue the operation through the Group (group.on(&comm)), \
                 so that its buffers stay borrowed until the group ends",
            ));
        }
        Ok(())
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // Destroying an aborted or finalized communicator is fine; a second destroy is refused
        // by core and means nothing here.
        let _ = self.comm.destroy();
    }
}

/// Creates the core communicator of a rank.
fn start(
    id: &UniqueId,
    rank: usize,
    nranks: usize,
    device: &Device,
    blocking: bool,
) -> Result<AnyComm> {
    if nranks == 0 {
        return Err(Error::arg("a communicator needs at least one rank"));
    }
    if rank >= nranks {
        return Err(Error::arg(format!(
            "rank {rank} is out of range for {nranks} ranks"
        )));
    }
    let mut config = CommConfig::from_env();
    config.blocking = blocking;
    Ok(device
        .runtime
        .backend
        .init_rank(nranks, id.0, rank, device.ordinal, config)?)
}

/// A communicator whose init is still running ([`Communicator::init_nonblocking`]). Dropping
/// it abandons the init.
pub struct PendingInit {
    comm: Option<AnyComm>,
    device: Device,
}

impl PendingInit {
    /// `Ok(true)` once every rank has joined, `Ok(false)` while init runs, or init's error.
    pub fn poll(&self) -> Result<bool> {
        match self.comm.as_ref().map(|c| c.status()) {
            Some(Ok(())) => Ok(true),
            Some(Err(oxccl_core::Error::InProgress)) => Ok(false),
            Some(Err(e)) => Err(e.into()),
            None => Err(Error::Internal("pending init already taken".into())),
        }
    }

    /// Blocks until init finished; returns the communicator or init's error.
    pub fn wait(mut self) -> Result<Communicator> {
        let comm = self
            .comm
            .take()
            .ok_or_else(|| Error::Internal("pending init already taken".into()))?;
        if let Err(e) = comm.wait_ready() {
            let _ = comm.destroy();
            return Err(e.into());
        }
        Communicator::wrap(comm, &self.device)
    }
}

impl Drop for PendingInit {
    fn drop(&mut self) {
        if let Some(c) = self.comm.take() {
            // Makes the init thread give up instead of finishing into a dropped communicator.
            let _ = c.destroy();
        }
    }
}

/// Aborts a communicator from any thread ([`Communicator::abort_handle`]).
#[derive(Clone)]
pub struct AbortHandle(AnyComm);

impl AbortHandle {
    /// `ncclCommAbort`: every wait of the communicator ends with an error; returns at once.
    pub fn abort(&self) {
        self.0.abort();
    }
}
