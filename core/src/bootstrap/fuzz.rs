//! Bounded fuzzing of the bootstrap's decoders (hello, unique id, root registration, peer
//! records, payload reader): random and mutated inputs never panic, and a mutation of any
//! checked field is refused. Deterministic, so a failure reproduces from its seed.

use super::info::PeerInfo;
use super::unique_id::IdFields;
use super::wire::{ConnKind, Dec, Enc, HELLO_BYTES, Hello, SessionKey};
use super::{UNIQUE_ID_BYTES, UniqueId};
use crate::testing::Rng;

/// Inputs per decoder (a few milliseconds each in release builds).
const ROUNDS: usize = 20_000;

fn key() -> SessionKey {
    SessionKey {
        secret: 0x0123_4567_89ab_cdef,
        nonce: 0xfedc_ba98_7654_3210,
    }
}

#[test]
fn fuzz_hello_decode() {
    let mut rng = Rng::new(1);
    let good = Hello {
        kind: ConnKind::Bootstrap,
        rank: 3,
        key: key(),
    }
    .encode();
    for _ in 0..ROUNDS {
        let mut b = [0u8; HELLO_BYTES];
        rng.fill(&mut b);
        assert!(Hello::decode(&b, ConnKind::Bootstrap, &key()).is_err());
        // One flipped byte of magic, version, kind, secret or nonce is always refused.
        let mut m = good;
        let i = rng.below(HELLO_BYTES as u64) as usize;
        m[i] ^= 1 + rng.below(255) as u8;
        let checked = !(11..16).contains(&i);
        let r = Hello::decode(&m, ConnKind::Bootstrap, &key());
        assert_eq!(r.is_err(), checked, "byte {i}: {r:?}");
    }
}

#[test]
fn fuzz_unique_id_decode() {
    let mut rng = Rng::new(2);
    let good = UniqueId::encode(&IdFields {
        root: "10.0.0.7:4242".parse().unwrap(),
        key: key(),
        root_at_init: false,
    });
    for _ in 0..ROUNDS {
        let mut b = [0u8; UNIQUE_ID_BYTES];
        rng.fill(&mut b);
        assert!(UniqueId(b).fields().is_err());
        let len = rng.below(2 * UNIQUE_ID_BYTES as u64) as usize;
        let v = rng.bytes(len);
        let _ = UniqueId::from_bytes(&v);
        // Magic, version and address family are checked; other bytes decode to other values.
        let mut m = good;
        let i = rng.below(12) as usize;
        if i == 10 {
            continue;
        }
        m.0[i] ^= 1 + rng.below(255) as u8;
        if i == 11 && (m.0[i] == 4 || m.0[i] == 6) {
            continue;
        }
        assert!(m.fields().is_err(), "byte {i} changed but accepted");
    }
    assert!(UniqueId([0; UNIQUE_ID_BYTES]).fields().is_err());
}

#[test]
fn fuzz_peer_records_and_payload_reader() {
    let mut rng = Rng::new(3);
    let mut e = Enc::default();
    PeerInfo::local(5, "127.0.0.1:9000".parse().unwrap()).encode(&mut e);
    let good = e.0;
    for _ in 0..ROUNDS {
        let len = rng.below(good.len() as u64 * 2) as usize;
        let noise = rng.bytes(len);
        let _ = PeerInfo::decode(&mut Dec(&noise));
        // Every truncation of a valid record is an error, never a panic.
        let cut = rng.below(good.len() as u64) as usize;
        assert!(PeerInfo::decode(&mut Dec(&good[..cut])).is_err());
        let mut m = good.clone();
        let i = rng.below(m.len() as u64) as usize;
        m[i] = rng.below(256) as u8;
        let _ = PeerInfo::decode(&mut Dec(&m));
        let mut d = Dec(&noise);
        while d.u8().is_ok() && d.bytes().is_ok() && d.addr().is_ok() {}
    }
    assert!(PeerInfo::decode(&mut Dec(&good)).is_ok());
}

#[test]
fn fuzz_root_registration_decode() {
    let mut rng = Rng::new(4);
    for _ in 0..ROUNDS {
        let len = rng.below(200) as usize;
        let _ = super::root::decode_registration_for_tests(&rng.bytes(len));
    }
}
