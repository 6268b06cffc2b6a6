//! This rank's symmetric windows as the GIN engine (`oxccl_net::gin`) sees them: a put's source
//! is read from, and a received payload written to, the window a handle names. Copies run on a
//! non-blocking stream of the engine's own and go through a pinned staging buffer, each waited
//! for: a kernel waiting for a signal on any stream (the legacy default one included) does not
//! hold them up, and neither does an application copy into pageable memory waiting for that
//! kernel (the driver stages every pageable copy of a context through one buffer, so a pageable
//! copy of the engine's would queue behind it). A handle is the one the window's descriptor
//! carries in `ginWins[]`; symmetric windows are registered collectively in one order, so a
//! handle names the same window on every rank.

use crate::api::{DeviceApi, Handle};
use oxccl_core::error::Result;
use oxccl_core::lock::lock;
use oxccl_net::gin::{GinMemory, WindowRanges};
use std::sync::{Arc, Mutex};

/// Bytes of the pinned staging buffer: a larger copy goes through it in pieces.
const STAGING_BYTES: usize = 1 << 20;

/// The windows of one communicator on one device, by GIN handle.
pub struct GinWindows<A: DeviceApi> {
    api: A,
    device: i32,
    stream: Handle,
    ranges: Arc<WindowRanges>,
    /// Pinned (registered with the device) while `self` lives.
    staging: Mutex<Box<[u8]>>,
}

impl<A: DeviceApi> GinWindows<A> {
    /// The windows `ranges` names (kept up to date by their owner), on `device`.
    pub fn new(api: A, device: i32, ranges: Arc<WindowRanges>) -> Result<GinWindows<A>> {
        let _bound = api.bind(device)?;
        let _relaxed = api.relaxed_capture()?;
        let mut staging = vec![0u8; STAGING_BYTES].into_boxed_slice();
        // SAFETY: the box stays allocated (and unmoved) until `drop` unregisters it.
        unsafe { api.host_register(staging.as_mut_ptr(), STAGING_BYTES) }?;
        let stream = match api.stream_create() {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: registered above, not used yet.
                unsafe { api.host_unregister(staging.as_mut_ptr()) };
                return Err(e);
            }
        };
        Ok(GinWindows {
            api,
            device,
            stream,
            ranges,
            staging: Mutex::new(staging),
        })
    }
}

impl<A: DeviceApi> GinMemory for GinWindows<A> {
    fn read(&self, handle: u64, offset: u64, dst: &mut [u8]) -> Result<()> {
        let src = self.ranges.at(handle, offset, dst.len(), "reads")?;
        let _bound = self.api.bind(self.device)?;
        // The engine's thread copies beside whatever the application captures.
        let _relaxed = self.api.relaxed_capture()?;
        let mut staging = lock(&self.staging);
        for (i, piece) in dst.chunks_mut(STAGING_BYTES).enumerate() {
            let from = src + (i * STAGING_BYTES) as u64;
            // SAFETY: `from` and the `piece.len()` bytes after it lie in a registered window;
            // the staging buffer holds them and is ours until the copy, waited for, is done.
            unsafe {
                (self.api).copy_d2h_async(staging.as_mut_ptr(), from, piece.len(), self.stream)
            }?;
            self.api.stream_sync(self.stream)?;
            piece.copy_from_slice(&staging[..piece.len()]);
        }
        Ok(())
    }

    fn write(&self, handle: u64, offset: u64, src: &[u8]) -> Result<()> {
        let dst = self.ranges.at(handle, offset, src.len(), "writes")?;
        let _bound = self.api.bind(self.device)?;
        let _relaxed = self.api.relaxed_capture()?;
        let mut staging = lock(&self.staging);
        for (i, piece) in src.chunks(STAGING_BYTES).enumerate() {
            staging[..piece.len()].copy_from_slice(piece);
            let to = dst + (i * STAGING_BYTES) as u64;
            // SAFETY: `to` and the `piece.len()` bytes after it lie in a registered window; the
            // staging buffer stays untouched until the copy, waited for, has landed (before
            // the engine applies the put's signal).
            unsafe { (self.api).copy_h2d_async(to, staging.as_ptr(), piece.len(), self.stream) }?;
            self.api.stream_sync(self.stream)?;
        }
        Ok(())
    }
}

impl<A: DeviceApi> Drop for GinWindows<A> {
    fn drop(&mut self) {
        if let Ok(_bound) = self.api.bind(self.device) {
            let _relaxed = self.api.relaxed_capture();
            let staging = self.staging.get_mut().unwrap_or_else(|e| e.into_inner());
            // SAFETY: every copy on the stream was waited for; nothing uses it or the staging
            // buffer any more.
            unsafe {
                self.api.stream_destroy(self.stream);
                self.api.host_unregister(staging.as_mut_ptr());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_api::FakeApi;

    /// Copies go to the named window on the windows' own stream, each waited for.
    #[test]
    fn copies_go_to_the_named_window_and_stay_inside_it() {
        let api = FakeApi::default();
        let ranges = Arc::new(WindowRanges::default());
        let w = GinWindows::new(api.clone(), 3, ranges.clone()).unwrap();
        assert_eq!(api.calls(), ["stream_create"]);
        ranges.add(7, 0x1000, 256);
        let mut buf = [0u8; 16];
        w.read(7, 240, &mut buf).unwrap();
        w.write(7, 0, &buf[..8]).unwrap();
        let s = w.stream;
        assert_eq!(
            api.calls(),
            [
                format!("copy_d2h_async 0x10f0 16 on {s}"),
                format!("stream_sync {s}"),
                format!("copy_h2d_async 0x1000 8 on {s}"),
                format!("stream_sync {s}"),
            ]
        );
        assert!(w.read(7, 241, &mut buf).is_err(), "one byte past the end");
        assert!(
            w.write(7, u64::MAX, &buf).is_err(),
            "an offset that overflows"
        );
        assert!(w.read(8, 0, &mut buf).is_err(), "an unknown window");
        ranges.remove(7);
        assert!(w.read(7, 0, &mut buf).is_err(), "a removed window");
        assert!(api.calls().is_empty(), "refused copies reach no device");
    }

    /// A copy larger than the staging buffer goes through it in pieces, in order.
    #[test]
    fn a_large_copy_goes_through_staging_in_pieces() {
        let api = FakeApi::default();
        let ranges = Arc::new(WindowRanges::default());
        let w = GinWindows::new(api.clone(), 0, ranges.clone()).unwrap();
        let s = w.stream;
        api.calls();
        ranges.add(1, 0x10_0000, 4 * STAGING_BYTES as u64);
        let mut buf = vec![0u8; STAGING_BYTES + 3];
        w.read(1, 8, &mut buf).unwrap();
        let second = 0x10_0008 + STAGING_BYTES;
        assert_eq!(
            api.calls(),
            [
                format!("copy_d2h_async 0x100008 {STAGING_BYTES} on {s}"),
                format!("stream_sync {s}"),
                format!("copy_d2h_async {second:#x} 3 on {s}"),
                format!("stream_sync {s}"),
            ]
        );
    }
}
