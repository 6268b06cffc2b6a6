//! This rank's symmetric windows as the GIN engine (`oxccl_net::gin`) sees them: a put's source
//! is read from, and a received payload written to, the window a handle names, by copies
//! between the engine's bounce buffers and device memory on a non-blocking stream of its own,
//! waited for: a kernel waiting for a signal on any stream (the legacy default one included)
//! does not hold them up. A handle is the one the
//! window's descriptor carries in `ginWins[]`; symmetric windows are registered collectively in
//! one order, so a handle names the same window on every rank.

use crate::api::{DeviceApi, Handle};
use oxccl_core::error::Result;
use oxccl_net::gin::{GinMemory, WindowRanges};
use std::sync::Arc;

/// The windows of one communicator on one device, by GIN handle.
pub struct GinWindows<A: DeviceApi> {
    api: A,
    device: i32,
    stream: Handle,
    ranges: Arc<WindowRanges>,
}

impl<A: DeviceApi> GinWindows<A> {
    /// The windows `ranges` names (kept up to date by their owner), on `device`.
    pub fn new(api: A, device: i32, ranges: Arc<WindowRanges>) -> Result<GinWindows<A>> {
        let _bound = api.bind(device)?;
        let _relaxed = api.relaxed_capture()?;
        let stream = api.stream_create()?;
        Ok(GinWindows {
            api,
            device,
            stream,
            ranges,
        })
    }
}

impl<A: DeviceApi> GinMemory for GinWindows<A> {
    fn read(&self, handle: u64, offset: u64, dst: &mut [u8]) -> Result<()> {
        let src = self.ranges.at(handle, offset, dst.len(), "reads")?;
        let _bound = self.api.bind(self.device)?;
        // The engine's thread copies beside whatever the application captures.
        let _relaxed = self.api.relaxed_capture()?;
        // SAFETY: `src` and the `dst.len()` bytes after it lie in a registered window, and
        // `dst` outlives the copy, which is waited for below.
        unsafe { (self.api).copy_d2h_async(dst.as_mut_ptr(), src, dst.len(), self.stream) }?;
        self.api.stream_sync(self.stream)
    }

    fn write(&self, handle: u64, offset: u64, src: &[u8]) -> Result<()> {
        let dst = self.ranges.at(handle, offset, src.len(), "writes")?;
        let _bound = self.api.bind(self.device)?;
        let _relaxed = self.api.relaxed_capture()?;
        // SAFETY: `dst` and the `src.len()` bytes after it lie in a registered window, and `src`
        // outlives the copy, which has landed when this returns (before the engine applies the
        // put's signal).
        unsafe { (self.api).copy_h2d_async(dst, src.as_ptr(), src.len(), self.stream) }?;
        self.api.stream_sync(self.stream)
    }
}

impl<A: DeviceApi> Drop for GinWindows<A> {
    fn drop(&mut self) {
        if let Ok(_bound) = self.api.bind(self.device) {
            let _relaxed = self.api.relaxed_capture();
            // SAFETY: every copy on the stream was waited for; nothing uses it any more.
            unsafe { self.api.stream_destroy(self.stream) };
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
}
