//! The GIN proxy descriptor ("GFD"): the 64 bytes a kernel built against NVIDIA's
//! `nccl_device.h` 2.28.9 writes into a host-mapped queue slot for every put, inline put
//! (`putValue`) or signal it sends through the proxy backend.
//!
//! That layout is fixed by NVIDIA's inline device code, not by oxccl, so this file is the one
//! place that knows it: the engine reads a slot through [`complete`] and [`decode`] and never
//! touches a bit position itself. Eight qwords, each with a valid flag in bit 0:
//!
//! | qword | contents (bit 0 is always the flag)                                          |
//! |-------|------------------------------------------------------------------------------|
//! | 0     | op (bits 1..=6), size in bytes (bits 7..=63)                                 |
//! | 1     | source offset (bits 1..); inline: value bits 0..32 in bytes 1-4, 32..48 in 5-6 |
//! | 2     | source window handle (bits 1..); inline: value bits 48..64 in bytes 1-2      |
//! | 3     | destination offset (bits 1..)                                                |
//! | 4     | destination window handle (bits 1..)                                         |
//! | 5     | counter id (bytes 1-2), signal id (bytes 3-4), signal value bits 0..16 (5-6) |
//! | 6     | signal value bits 16..32 (bytes 1-2) and 32..64 (bytes 3-6)                  |
//! | 7     | flag only                                                                    |
//!
//! The device builds the descriptor in a stack or shared-memory buffer it never clears and
//! writes only the fields the op needs, so the flag byte's upper bits, the reserved bytes and
//! the inline bytes a narrow value leaves alone hold stale data; the decoder reads none of them.
//! There is no doorbell: the host learns of a descriptor only from the eight flags, and must
//! zero the slot once it has copied it out so that the flags of the next lap mean something.

/// Bytes of one descriptor (one queue slot).
pub const GFD_BYTES: usize = 64;

/// Op bit every descriptor carries: the only base operation NCCL 2.28.9 has.
pub const PUT: u8 = 1;
/// Op bit of `putValue`: the source is the value inside the descriptor, not a window.
pub const WITH_INLINE: u8 = 2;
/// Op bit for a local counter to bump once the source may be reused.
pub const WITH_COUNTER: u8 = 4;
/// Op bit for adding 1 to a signal at the destination after the data.
pub const WITH_SIGNAL_INC: u8 = 8;
/// Op bit for adding a 64-bit value to a signal at the destination after the data.
pub const WITH_SIGNAL_ADD: u8 = 16;

const KNOWN_OPS: u8 = PUT | WITH_INLINE | WITH_COUNTER | WITH_SIGNAL_INC | WITH_SIGNAL_ADD;
const OP_FIELD: u64 = 0x3f;
const FLAG: u64 = 1;

/// The remote signal a descriptor asks for once its data has landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Add 1 to signal `id`.
    Inc(u16),
    /// Add the value to signal `id`.
    Add(u16, u64),
}

/// One decoded descriptor, fields as wide as the device's bitfields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gfd {
    /// The raw 6-bit op: [`PUT`] plus `WITH_*` bits.
    pub op: u8,
    /// Bytes to move (57 bits); 0 for a signal alone, `sizeof(T)` for an inline put.
    pub size: u64,
    /// Source window handle and offset (63 bits each); `None` for an inline put.
    pub src: Option<(u64, u64)>,
    /// An inline put's value, masked to `size` bytes; `None` for a windowed put.
    pub inline_value: Option<u64>,
    /// Destination window handle (63 bits): the sender's own handle for the window.
    pub dst_handle: u64,
    /// Destination offset (63 bits), the window's 4 KiB-granular GIN offset already added.
    pub dst_offset: u64,
    /// Local counter to bump, when the op has [`WITH_COUNTER`].
    pub counter: Option<u16>,
    /// Remote signal, when the op has [`WITH_SIGNAL_INC`] or [`WITH_SIGNAL_ADD`].
    pub signal: Option<Signal>,
}

/// Whether all eight qwords of `slot` (as they lie in memory) carry their valid flag.
pub fn complete(slot: &[u64; 8]) -> bool {
    // The device's four 16-byte stores may become visible in any order, so one flag says
    // nothing about the others.
    slot.iter().all(|&q| u64::from_le(q) & FLAG != 0)
}

/// Decodes a slot copied out of the queue (qwords as they lie in memory).
pub fn decode(slot: &[u64; 8]) -> Result<Gfd, String> {
    if let Some(i) = slot.iter().position(|&q| u64::from_le(q) & FLAG == 0) {
        return Err(format!(
            "GIN descriptor incomplete: qword {i} has no valid flag yet."
        ));
    }
    let q = slot.map(u64::from_le);
    let op = ((q[0] >> 1) & OP_FIELD) as u8;
    let size = q[0] >> 7;
    if op & PUT == 0 {
        return Err(format!(
            "GIN descriptor op {op:#04x} lacks the Put bit, the only operation there is."
        ));
    }
    if op & !KNOWN_OPS != 0 {
        return Err(format!(
            "GIN descriptor op {op:#04x} has bits NCCL 2.28.9 does not define."
        ));
    }
    if op & WITH_SIGNAL_INC != 0 && op & WITH_SIGNAL_ADD != 0 {
        return Err(format!(
            "GIN descriptor op {op:#04x} asks for both a signal increment and a signal add."
        ));
    }

    let (src, inline_value) = if op & WITH_INLINE != 0 {
        // putValue's size is sizeof(T), at most 8; anything else would have the host read past
        // the value.
        if !(1..=8).contains(&size) {
            return Err(format!(
                "GIN inline descriptor carries {size} bytes; an inline put carries 1 to 8."
            ));
        }
        let low = (q[1] >> 8) & 0xffff_ffff;
        let low2 = (q[1] >> 40) & 0xffff;
        let high = (q[2] >> 8) & 0xffff;
        let value = low | (low2 << 32) | (high << 48);
        // The device writes the upper parts only for a wide enough T, and casts a signed T
        // with sign extension, so bytes past `size` are stale or sign bits.
        (None, Some(value & (u64::MAX >> (64 - 8 * size))))
    } else {
        (Some((q[2] >> 1, q[1] >> 1)), None)
    };

    let counter = (op & WITH_COUNTER != 0).then_some((q[5] >> 8) as u16);
    let signal_id = (q[5] >> 24) as u16;
    let signal = if op & WITH_SIGNAL_INC != 0 {
        // The device also writes 1 as the value; the op alone says what to add.
        Some(Signal::Inc(signal_id))
    } else if op & WITH_SIGNAL_ADD != 0 {
        let low = (q[5] >> 40) & 0xffff;
        let low2 = (q[6] >> 8) & 0xffff;
        let high = (q[6] >> 24) & 0xffff_ffff;
        Some(Signal::Add(signal_id, low | (low2 << 16) | (high << 32)))
    } else {
        None
    };

    Ok(Gfd {
        op,
        size,
        src,
        inline_value,
        dst_handle: q[4] >> 1,
        dst_offset: q[3] >> 1,
        counter,
        signal,
    })
}

/// Builds descriptors the way NVIDIA's device code does, so tests can post them into a fake
/// queue.
#[cfg(test)]
pub(crate) mod encode {
    use super::{
        FLAG, Gfd, OP_FIELD, PUT, Signal, WITH_COUNTER, WITH_INLINE, WITH_SIGNAL_ADD,
        WITH_SIGNAL_INC,
    };

    /// The op bits `ncclGin::put`, `putValue` or `signal` would set.
    fn op(inline: bool, counter: Option<u16>, signal: Option<Signal>) -> u8 {
        let mut op = PUT;
        if inline {
            op |= WITH_INLINE;
        }
        if counter.is_some() {
            op |= WITH_COUNTER;
        }
        match signal {
            Some(Signal::Inc(_)) => op |= WITH_SIGNAL_INC,
            Some(Signal::Add(..)) => op |= WITH_SIGNAL_ADD,
            None => {}
        }
        op
    }

    /// What `ncclGin::put` of `bytes` from a source window to a destination window posts.
    pub(crate) fn put(
        dst_handle: u64,
        dst_offset: u64,
        src_handle: u64,
        src_offset: u64,
        bytes: u64,
        counter: Option<u16>,
        signal: Option<Signal>,
    ) -> Gfd {
        Gfd {
            op: op(false, counter, signal),
            size: bytes,
            src: Some((src_handle, src_offset)),
            inline_value: None,
            dst_handle,
            dst_offset,
            counter,
            signal,
        }
    }

    /// What `ncclGin::putValue` of a `bytes`-wide value posts; `value` is the device's
    /// `(uint64_t)value`, so a negative signed value comes sign-extended, and [`encode`] writes
    /// it unmasked as the device does.
    pub(crate) fn put_value(
        dst_handle: u64,
        dst_offset: u64,
        value: u64,
        bytes: u64,
        signal: Option<Signal>,
    ) -> Gfd {
        Gfd {
            op: op(true, None, signal),
            size: bytes,
            src: None,
            inline_value: Some(value),
            dst_handle,
            dst_offset,
            counter: None,
            signal,
        }
    }

    /// What `ncclGin::signal` posts: no windows, no data.
    pub(crate) fn signal(signal: Signal) -> Gfd {
        put(0, 0, 0, 0, 0, None, Some(signal))
    }

    /// The slot (qwords as they lie in memory) the device writes for `gfd`, starting from a
    /// zeroed buffer; `gfd.op` goes in as is, so tests can forge bad ops.
    pub(crate) fn encode(gfd: &Gfd) -> [u64; 8] {
        let mut q = [0u64; 8];
        // Shifting a field up past bit 63 drops its top bits just as the device's bitfield
        // stores truncate to 57 or 63 bits.
        q[0] = FLAG | ((u64::from(gfd.op) & OP_FIELD) << 1) | (gfd.size << 7);
        match (gfd.src, gfd.inline_value) {
            (_, Some(v)) => {
                q[1] = FLAG | ((v & 0xffff_ffff) << 8);
                q[2] = FLAG;
                if gfd.size > 4 {
                    q[1] |= ((v >> 32) & 0xffff) << 40;
                }
                if gfd.size > 6 {
                    q[2] |= (v >> 48) << 8;
                }
            }
            (src, None) => {
                let (handle, offset) = src.unwrap_or((0, 0));
                q[1] = FLAG | (offset << 1);
                q[2] = FLAG | (handle << 1);
            }
        }
        q[3] = FLAG | (gfd.dst_offset << 1);
        q[4] = FLAG | (gfd.dst_handle << 1);
        let (signal_id, signal_value) = match gfd.signal {
            Some(Signal::Inc(id)) => (id, 1),
            Some(Signal::Add(id, v)) => (id, v),
            None => (0, 0),
        };
        q[5] = FLAG
            | (u64::from(gfd.counter.unwrap_or(0)) << 8)
            | (u64::from(signal_id) << 24)
            | ((signal_value & 0xffff) << 40);
        q[6] = FLAG | (((signal_value >> 16) & 0xffff) << 8) | ((signal_value >> 32) << 24);
        q[7] = FLAG;
        q.map(u64::to_le)
    }
}

#[cfg(test)]
mod tests {
    use super::encode::{encode, put, put_value, signal};
    use super::*;

    // Golden images: NVIDIA's own unions from gin_proxy_device_host_common.h (v2.28.9-1),
    // compiled with g++ on x86-64 and filled field by field as gin_proxy.h's buildGfd and
    // constructProxyOp do, printed as `qword[i].raw`. `_STALE` images started from a buffer
    // of 0xa5 bytes instead of zeros, as a reused shared-memory descriptor would.
    const DST: u64 = 0x7f3a_5d00_2000;

    /// put of 0x100008 bytes, CounterInc 0x1234, SignalAdd 0xbeef += 0xfedcba9876543210.
    const GOLD_PUT: [u64; 8] = [
        0x000000000800042b,
        0x0000000200004001,
        0x0000fe74b8002001,
        0x0000000400006011,
        0x0000fe74ba004001,
        0x003210beef123401,
        0x00fedcba98765401,
        0x0000000000000001,
    ];
    const GOLD_PUT_STALE: [u64; 8] = [
        0x000000000800042b,
        0x0000000200004001,
        0x0000fe74b8002001,
        0x0000000400006011,
        0x0000fe74ba004001,
        0xa53210beef1234a5,
        0xa5fedcba987654a5,
        0xa5a5a5a5a5a5a5a5,
    ];
    /// putValue<uint64_t>(0x0123456789abcdef) at offset 0x40.
    const GOLD_U64: [u64; 8] = [
        0x0000000000000407,
        0x00456789abcdef01,
        0x0000000000012301,
        0x0000000000000081,
        0x0000fe74ba004001,
        0x0000000000000001,
        0x0000000000000001,
        0x0000000000000001,
    ];
    const GOLD_U64_STALE: [u64; 8] = [
        0x0000000000000407,
        0xa5456789abcdefa5,
        0xa5a5a5a5a50123a5,
        0x0000000000000081,
        0x0000fe74ba004001,
        0xa5000000000000a5,
        0xa5000000000000a5,
        0xa5a5a5a5a5a5a5a5,
    ];
    /// putValue<uint32_t>(0xdeadbeef) at offset 0x1008 with SignalInc 3.
    const GOLD_U32: [u64; 8] = [
        0x0000000000000217,
        0x000000deadbeef01,
        0x0000000000000001,
        0x0000000000002011,
        0x0000fe74ba004001,
        0x0000010003000001,
        0x0000000000000001,
        0x0000000000000001,
    ];
    const GOLD_U32_STALE: [u64; 8] = [
        0x0000000000000217,
        0xa5a5a5deadbeefa5,
        0xa5a5a5a5a5a5a5a5,
        0x0000000000002011,
        0x0000fe74ba004001,
        0xa5000100030000a5,
        0xa5000000000000a5,
        0xa5a5a5a5a5a5a5a5,
    ];
    /// putValue<uint16_t>(0xbeef) at offset 0x2000000002 with SignalAdd 0xffff += 0x100000001.
    const GOLD_U16: [u64; 8] = [
        0x0000000000000127,
        0x0000000000beef01,
        0x0000000000000001,
        0x0000004000000005,
        0x0000fe74ba004001,
        0x000001ffff000001,
        0x0000000001000001,
        0x0000000000000001,
    ];
    const GOLD_U16_STALE: [u64; 8] = [
        0x0000000000000127,
        0xa5a5a50000beefa5,
        0xa5a5a5a5a5a5a5a5,
        0x0000004000000005,
        0x0000fe74ba004001,
        0xa50001ffff0000a5,
        0xa5000000010000a5,
        0xa5a5a5a5a5a5a5a5,
    ];
    /// putValue<int8_t>(-1) at offset 7: the u32 cast sign-extends into bytes 2-4.
    const GOLD_I8: [u64; 8] = [
        0x0000000000000087,
        0x000000ffffffff01,
        0x0000000000000001,
        0x000000000000000f,
        0x0000fe74ba004001,
        0x0000000000000001,
        0x0000000000000001,
        0x0000000000000001,
    ];
    /// signal(SignalInc 7).
    const GOLD_SIG_INC: [u64; 8] = [
        0x0000000000000013,
        0x0000000000000001,
        0x0000000000000001,
        0x0000000000000001,
        0x0000000000000001,
        0x0000010007000001,
        0x0000000000000001,
        0x0000000000000001,
    ];
    const GOLD_SIG_INC_STALE: [u64; 8] = [
        0x0000000000000013,
        0x0000000000000001,
        0x0000000000000001,
        0x0000000000000001,
        0x0000000000000001,
        0xa5000100070000a5,
        0xa5000000000000a5,
        0xa5a5a5a5a5a5a5a5,
    ];
    /// signal(SignalAdd 0x8000 += u64::MAX).
    const GOLD_SIG_ADD: [u64; 8] = [
        0x0000000000000023,
        0x0000000000000001,
        0x0000000000000001,
        0x0000000000000001,
        0x0000000000000001,
        0x00ffff8000000001,
        0x00ffffffffffff01,
        0x0000000000000001,
    ];
    /// put with every field too wide: size 0xff80000000000003, src (0x8000000000001000,
    /// u64::MAX), dst (0xfffffffffffffffe, 0x8000000000000008).
    const GOLD_TRUNC: [u64; 8] = [
        0xc000000000000183,
        0xffffffffffffffff,
        0x0000000000002001,
        0x0000000000000011,
        0xfffffffffffffffd,
        0x0000000000000001,
        0x0000000000000001,
        0x0000000000000001,
    ];

    /// The golden values are what an x86-64 (little-endian) load of the slot reads.
    fn mem(gold: [u64; 8]) -> [u64; 8] {
        gold.map(u64::to_le)
    }

    fn check(gold: [u64; 8], stale: Option<[u64; 8]>, built: Gfd, decoded: Gfd) {
        assert_eq!(encode(&built), mem(gold), "encode({built:?})");
        assert_eq!(decode(&mem(gold)), Ok(decoded));
        if let Some(stale) = stale {
            assert_eq!(decode(&mem(stale)), Ok(decoded));
        }
    }

    #[test]
    fn golden_put_with_counter_and_signal_add() {
        let g = put(
            DST,
            0x2_0000_3008,
            0x7f3a_5c00_1000,
            0x1_0000_2000,
            0x10_0008,
            Some(0x1234),
            Some(Signal::Add(0xbeef, 0xfedc_ba98_7654_3210)),
        );
        assert_eq!(g.op, PUT | WITH_COUNTER | WITH_SIGNAL_ADD);
        check(GOLD_PUT, Some(GOLD_PUT_STALE), g, g);
        // Byte view of the completion qword: flag, counter id, signal id, value bits 0..16.
        assert_eq!(
            GOLD_PUT[5].to_le_bytes(),
            [0x01, 0x34, 0x12, 0xef, 0xbe, 0x10, 0x32, 0x00]
        );
    }

    #[test]
    fn golden_put_value_u64() {
        let g = put_value(DST, 0x40, 0x0123_4567_89ab_cdef, 8, None);
        assert_eq!(g.op, PUT | WITH_INLINE);
        check(GOLD_U64, Some(GOLD_U64_STALE), g, g);
        assert_eq!(
            GOLD_U64[1].to_le_bytes(),
            [0x01, 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x00]
        );
    }

    #[test]
    fn golden_put_value_u32_with_signal_inc() {
        let g = put_value(DST, 0x1008, 0xdead_beef, 4, Some(Signal::Inc(3)));
        assert_eq!(g.op, PUT | WITH_INLINE | WITH_SIGNAL_INC);
        check(GOLD_U32, Some(GOLD_U32_STALE), g, g);
    }

    #[test]
    fn golden_put_value_u16_with_signal_add() {
        let sig = Some(Signal::Add(0xffff, 0x1_0000_0001));
        let g = put_value(DST, 0x20_0000_0002, 0xbeef, 2, sig);
        check(GOLD_U16, Some(GOLD_U16_STALE), g, g);
    }

    #[test]
    fn golden_put_value_negative_i8_is_masked() {
        let sent = put_value(DST, 7, (-1i64) as u64, 1, None);
        let got = Gfd {
            inline_value: Some(0xff),
            ..sent
        };
        check(GOLD_I8, None, sent, got);
    }

    #[test]
    fn inline_upper_parts_follow_the_width() {
        // By hand from buildGfd: bits 32..48 only when sizeof(T) > 4, bits 48..64 only when
        // sizeof(T) > 6; an all-ones value shows which bytes each width touches.
        for (bytes, q1, q2, value) in [
            (4, 0x0000_00ff_ffff_ff01, 0x1, 0xffff_ffff),
            (6, 0x00ff_ffff_ffff_ff01, 0x1, 0xffff_ffff_ffff),
            (7, 0x00ff_ffff_ffff_ff01, 0xff_ff01, 0xff_ffff_ffff_ffff),
        ] {
            let sent = put_value(DST, 0, u64::MAX, bytes, None);
            let slot = encode(&sent);
            assert_eq!(
                (u64::from_le(slot[1]), u64::from_le(slot[2])),
                (q1, q2),
                "{bytes} bytes"
            );
            assert_eq!(decode(&slot).unwrap().inline_value, Some(value));
        }
    }

    #[test]
    fn golden_signal_only() {
        let g = signal(Signal::Inc(7));
        assert_eq!((g.op, g.size), (PUT | WITH_SIGNAL_INC, 0));
        check(GOLD_SIG_INC, Some(GOLD_SIG_INC_STALE), g, g);
        let g = signal(Signal::Add(0x8000, u64::MAX));
        check(GOLD_SIG_ADD, None, g, g);
        assert_eq!(decode(&mem(GOLD_SIG_ADD)).unwrap().src, Some((0, 0)));
    }

    #[test]
    fn golden_truncation_to_bitfield_widths() {
        let sent = put(
            0xffff_ffff_ffff_fffe,
            0x8000_0000_0000_0008,
            0x8000_0000_0000_1000,
            u64::MAX,
            0xff80_0000_0000_0003,
            None,
            None,
        );
        let got = Gfd {
            size: 0x0180_0000_0000_0003,
            src: Some((0x1000, u64::MAX >> 1)),
            dst_handle: 0x7fff_ffff_ffff_fffe,
            dst_offset: 8,
            ..sent
        };
        check(GOLD_TRUNC, None, sent, got);
    }

    #[test]
    fn round_trip() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let signals = |id: u16, v: u64| [None, Some(Signal::Inc(id)), Some(Signal::Add(id, v))];
        for round in 0..64 {
            let (h, o) = (next() >> 1, next() >> 1);
            let id = next() as u16;
            for sig in signals(id, next()) {
                for counter in [None, Some(next() as u16)] {
                    let g = put(h, o, next() >> 1, next() >> 1, next() >> 7, counter, sig);
                    assert_eq!(decode(&encode(&g)), Ok(g), "round {round}");
                }
                for bytes in 1..=8u64 {
                    let v = next() & (u64::MAX >> (64 - 8 * bytes));
                    let g = put_value(h, o, v, bytes, sig);
                    assert_eq!(decode(&encode(&g)), Ok(g), "round {round}");
                }
            }
        }
    }

    fn with_op(op: u8, size: u64) -> [u64; 8] {
        let mut q = mem(GOLD_PUT).map(u64::from_le);
        q[0] = FLAG | (u64::from(op) << 1) | (size << 7);
        mem(q)
    }

    fn err(slot: [u64; 8], words: &str) {
        match decode(&slot) {
            Err(e) => assert!(e.contains(words), "{e:?} lacks {words:?}"),
            Ok(g) => panic!("decoded {g:?}, expected an error about {words:?}"),
        }
    }

    #[test]
    fn errors() {
        for i in 0..8 {
            let mut slot = mem(GOLD_PUT);
            slot[i] &= !1u64.to_le();
            err(slot, &format!("incomplete: qword {i}"));
        }
        err([0; 8], "incomplete: qword 0");
        err(
            with_op(WITH_COUNTER | WITH_SIGNAL_ADD, 8),
            "lacks the Put bit",
        );
        err(with_op(0, 0), "lacks the Put bit");
        err(
            with_op(PUT | WITH_SIGNAL_INC | WITH_SIGNAL_ADD, 8),
            "both a signal increment and a signal add",
        );
        err(with_op(PUT | 0x20, 8), "does not define");
        err(with_op(PUT | WITH_INLINE, 0), "carries 0 bytes");
        err(with_op(PUT | WITH_INLINE, 9), "carries 9 bytes");
        assert!(decode(&with_op(PUT | WITH_INLINE, 8)).is_ok());
    }

    #[test]
    fn complete_needs_every_flag() {
        assert!(complete(&mem(GOLD_PUT)));
        assert!(complete(&mem(GOLD_U64_STALE)));
        assert!(complete(&[1u64.to_le(); 8]));
        assert!(!complete(&[0; 8]));
        for i in 0..8 {
            let mut slot = mem(GOLD_PUT_STALE);
            slot[i] &= !1u64.to_le();
            assert!(!complete(&slot), "qword {i} unflagged");
            // Anything but bit 0 counts for nothing.
            let mut slot = [1u64.to_le(); 8];
            slot[i] = (!1u64).to_le();
            assert!(!complete(&slot), "qword {i} all ones but the flag");
        }
    }

    #[test]
    fn slot_is_eight_qwords() {
        assert_eq!(GFD_BYTES, std::mem::size_of::<[u64; 8]>());
    }
}
