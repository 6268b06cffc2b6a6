//! The messages GIN engines exchange: one or more records, each a 64-byte header and up to
//! [`CHUNK_BYTES`] of payload, padded to 8 bytes. A put larger than one chunk travels as several
//! records; only its last carries the signal, so the destination applies it after the whole
//! payload (and every earlier record of the connection) has been written. Several small puts
//! share one message: one network send and one receive instead of one each.

use oxccl_core::error::{Error, Result};

/// Bytes of a header.
pub(crate) const HEADER_BYTES: usize = 64;

/// Most payload bytes one message carries.
pub(crate) const CHUNK_BYTES: usize = 256 << 10;

/// Bytes of the largest message.
pub(crate) const MESSAGE_BYTES: usize = HEADER_BYTES + CHUNK_BYTES;

/// Bytes a record of `payload` bytes takes in a message.
pub(crate) fn record_bytes(payload: usize) -> usize {
    HEADER_BYTES + payload.next_multiple_of(8)
}

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

    /// The records of a received message of `len` bytes: each header with its payload.
    pub(crate) fn records(msg: &[u8], len: usize) -> Result<Vec<(Header, &[u8])>> {
        if msg.len() < len || len == 0 {
            return Err(Error::Internal(format!(
                "a GIN message of {len} bytes (in a buffer of {})",
                msg.len()
            )));
        }
        let mut out = Vec::new();
        let mut at = 0;
        while at < len {
            let h = Header::decode(&msg[at..len])?;
            let payload = &msg[at + HEADER_BYTES..at + HEADER_BYTES + h.bytes as usize];
            at += record_bytes(h.bytes as usize);
            out.push((h, payload));
        }
        Ok(out)
    }

    /// The header at the start of `rest`, a message from a record on, whose payload it holds.
    fn decode(rest: &[u8]) -> Result<Header> {
        let len = rest.len();
        if len < HEADER_BYTES {
            return Err(Error::Internal(format!(
                "a GIN record of {len} bytes is shorter than its header"
            )));
        }
        let w = |i: usize| u64::from_le_bytes(rest[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
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
        if h.bytes > CHUNK_BYTES as u64 || record_bytes(h.bytes as usize) > len {
            return Err(Error::Internal(format!(
                "a GIN record says {} payload bytes but {} are left",
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
    fn records_round_trip_and_bad_ones_are_refused() {
        let h = Header {
            window: 3,
            offset: 1 << 40,
            bytes: 5,
            signal: Some(SignalAdd {
                id: 65535,
                value: u64::MAX,
            }),
        };
        let plain = Header {
            signal: None,
            bytes: 0,
            ..h
        };
        let len = record_bytes(5) + record_bytes(0);
        assert_eq!(len, 136);
        let mut msg = vec![0u8; len];
        h.encode((&mut msg[..HEADER_BYTES]).try_into().unwrap());
        msg[HEADER_BYTES..HEADER_BYTES + 5].copy_from_slice(b"abcde");
        plain.encode((&mut msg[72..72 + HEADER_BYTES]).try_into().unwrap());
        let got = Header::records(&msg, len).unwrap();
        assert_eq!(got, [(h, &b"abcde"[..]), (plain, &[][..])]);
        assert_eq!(Header::records(&msg, 72).unwrap(), [(h, &b"abcde"[..])]);
        assert!(Header::records(&msg, 70).is_err(), "a payload cut short");
        assert!(Header::records(&msg, 80).is_err(), "a header cut short");
        assert!(Header::records(&msg, 0).is_err(), "an empty message");
        msg[72] ^= 1;
        assert!(Header::records(&msg, len).is_err(), "not our magic");
    }
}
