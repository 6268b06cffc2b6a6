//! The messages GIN engines exchange: a 64-byte header, then up to [`CHUNK_BYTES`] of payload.
//! A put larger than one chunk travels as several messages; only its last carries the signal,
//! so the destination applies it after the whole payload (and every earlier message of the
//! connection) has been written.

use oxccl_core::error::{Error, Result};

/// Bytes of a header.
pub(crate) const HEADER_BYTES: usize = 64;

/// Most payload bytes one message carries.
pub(crate) const CHUNK_BYTES: usize = 256 << 10;

/// Bytes of the largest message.
pub(crate) const MESSAGE_BYTES: usize = HEADER_BYTES + CHUNK_BYTES;

/// Marks a header of this protocol (and its version) in the first word.
const MAGIC: u64 = 0x6f78_6769_6e00_0001;

/// The signal a message applies once its payload is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SignalAdd {
    /// The destination's signal id.
    pub id: u16,
    /// Added to it (1 for an increment).
    pub value: u64,
}

/// One message's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// The window the payload goes to (unused without payload).
    pub window: u64,
    /// Where in it.
    pub offset: u64,
    /// Payload bytes after the header.
    pub bytes: u64,
    /// The signal to apply after the payload.
    pub signal: Option<SignalAdd>,
}

impl Header {
    /// The header as it travels (little-endian words).
    pub(crate) fn encode(&self, out: &mut [u8; HEADER_BYTES]) {
        let (has, id, value) = match self.signal {
            Some(s) => (1, u64::from(s.id), s.value),
            None => (0, 0, 0),
        };
        let words = [
            MAGIC,
            has,
            self.window,
            self.offset,
            self.bytes,
            id,
            value,
            0,
        ];
        for (chunk, w) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
    }

    /// The header at the start of a received message of `len` bytes.
    pub(crate) fn decode(msg: &[u8], len: usize) -> Result<Header> {
        if len < HEADER_BYTES || msg.len() < len {
            return Err(Error::Internal(format!(
                "a GIN message of {len} bytes is shorter than its header"
            )));
        }
        let w = |i: usize| u64::from_le_bytes(msg[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        if w(0) != MAGIC {
            return Err(Error::Internal(format!(
                "a GIN message starts with {:#x}, not this protocol's header",
                w(0)
            )));
        }
        let h = Header {
            window: w(2),
            offset: w(3),
            bytes: w(4),
            signal: (w(1) & 1 == 1).then(|| SignalAdd {
                id: w(5) as u16,
                value: w(6),
            }),
        };
        if h.bytes as usize != len - HEADER_BYTES {
            return Err(Error::Internal(format!(
                "a GIN message says {} payload bytes but carries {}",
                h.bytes,
                len - HEADER_BYTES
            )));
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_bad_ones_are_refused() {
        let h = Header {
            window: 3,
            offset: 1 << 40,
            bytes: 5,
            signal: Some(SignalAdd {
                id: 65535,
                value: u64::MAX,
            }),
        };
        let mut msg = vec![0u8; HEADER_BYTES + 5];
        h.encode((&mut msg[..HEADER_BYTES]).try_into().unwrap());
        assert_eq!(Header::decode(&msg, msg.len()).unwrap(), h);
        let plain = Header { signal: None, ..h };
        plain.encode((&mut msg[..HEADER_BYTES]).try_into().unwrap());
        assert_eq!(Header::decode(&msg, msg.len()).unwrap(), plain);
        assert!(
            Header::decode(&msg, HEADER_BYTES + 4).is_err(),
            "length mismatch"
        );
        assert!(Header::decode(&msg, 10).is_err(), "shorter than a header");
        msg[0] ^= 1;
        assert!(Header::decode(&msg, msg.len()).is_err(), "not our magic");
    }
}
