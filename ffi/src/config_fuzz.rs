//! Bounded fuzzing of `ncclConfig_t` decoding: random sizes, magics, versions and field values
//! (pointers kept NULL, as a C caller's would be valid) are accepted or refused with
//! `ncclInvalidArgument`, never a panic; bytes past the struct are ignored.

use crate::abi::{NCCL_CONFIG_MAGIC, ncclConfig_t};
use crate::config::{read_raw, to_core};
use oxccl_core::ErrorKind;
use oxccl_core::testing::Rng;

#[test]
fn fuzz_config_decoding() {
    let mut rng = Rng::new(21);
    let words = size_of::<ncclConfig_t>() / 8 + 8;
    let (mut accepted, mut refused) = (0, 0);
    for round in 0..20_000 {
        // Room for trailing fields of a newer header; u64 words keep the buffer aligned.
        let mut buf = vec![0u64; words];
        let bytes = words * 8;
        for w in buf.iter_mut() {
            *w = rng.next_u64();
        }
        let mut cfg = ncclConfig_t::initializer();
        // SAFETY: `buf` holds `bytes >= sizeof(ncclConfig_t)` bytes, every pattern of which is a
        // valid ncclConfig_t (integers and raw pointers).
        unsafe {
            std::ptr::copy_nonoverlapping(
                buf.as_ptr().cast::<u8>(),
                (&raw mut cfg).cast(),
                size_of::<ncclConfig_t>(),
            )
        };
        cfg.size = match round % 4 {
            0 => rng.below(bytes as u64 + 1) as usize,
            1 => size_of::<ncclConfig_t>(),
            2 => usize::MAX,
            _ => cfg.size,
        };
        if round % 3 != 0 {
            cfg.magic = NCCL_CONFIG_MAGIC;
        }
        cfg.netName = std::ptr::null();
        cfg.commName = std::ptr::null();
        // SAFETY: `cfg` is live; `read_raw` reads at most sizeof(ncclConfig_t) bytes of it.
        let raw = unsafe { read_raw(&cfg) };
        let r = raw.and_then(|mut c| {
            c.netName = std::ptr::null();
            c.commName = std::ptr::null();
            // SAFETY: both string fields are NULL.
            unsafe { to_core(&c) }
        });
        match r {
            Ok(_) => accepted += 1,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
                refused += 1;
            }
        }
    }
    assert!(refused > 0);
    let _ = accepted;
}
