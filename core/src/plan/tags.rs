//! Message tags: which stream of messages between two ranks a step belongs to.
//!
//! Executors match messages by (sender, receiver, tag) in FIFO order, so two streams that may be
//! in flight at the same time between the same pair must never share a tag. Layout of a tag:
//!
//! ```text
//! bit 63      : 0 = collective, 1 = point-to-point
//! bits 8..63  : collective sequence number / p2p per-pair sequence number (wraps)
//! bits 0..8   : channel
//! ```
//!
//! Every channel gets its own tag because channels run concurrently: two channels sending on the
//! same tag would race for the receiver's FIFO.

#![forbid(unsafe_code)]

/// Bits of a tag that hold the channel.
pub const CHANNEL_BITS: u32 = 8;

/// Most channels a plan may use (well below what the tag layout could hold).
pub const MAX_CHANNELS: u32 = 64;

/// Set in every point-to-point tag, clear in every collective tag.
pub const P2P_BIT: u64 = 1 << 63;

const CHANNEL_MASK: u64 = (1 << CHANNEL_BITS) - 1;
const SEQ_MASK: u64 = (1 << (63 - CHANNEL_BITS)) - 1;

/// Tag of collective number `seq` on `channel`.
pub fn coll_tag(seq: u64, channel: u32) -> u64 {
    ((seq & SEQ_MASK) << CHANNEL_BITS) | (u64::from(channel) & CHANNEL_MASK)
}

/// Tag of the `peer_seq`-th point-to-point message between a pair, on channel 0.
pub fn p2p_tag(peer_seq: u64) -> u64 {
    P2P_BIT | ((peer_seq & SEQ_MASK) << CHANNEL_BITS)
}

/// Tag of the chunks of the `peer_seq`-th point-to-point message that travel on `channel`.
pub fn p2p_chunk_tag(peer_seq: u64, channel: u32) -> u64 {
    p2p_tag(peer_seq) | (u64::from(channel) & CHANNEL_MASK)
}

/// Tag of the order tokens of FIFO channel `fifo` (messages to self that keep a split
/// channel's receives behind its sends, `plan::split`): a point-to-point tag with every
/// sequence bit set, which no pair reaches in practice (2^55 messages).
pub fn order_token_tag(fifo: u32) -> u64 {
    p2p_chunk_tag(SEQ_MASK, fifo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn tags_never_collide() {
        let mut seen = HashSet::new();
        // Every sequence number but the last, which the order tokens take.
        for seq in [0u64, 1, 2, 255, 256, 1 << 40, SEQ_MASK - 1] {
            for ch in 0..MAX_CHANNELS {
                assert!(seen.insert(coll_tag(seq, ch)));
                assert!(seen.insert(p2p_chunk_tag(seq, ch)));
            }
        }
        for ch in 0..MAX_CHANNELS {
            assert!(seen.insert(order_token_tag(ch)));
        }
        assert_eq!(p2p_tag(5), p2p_chunk_tag(5, 0));
        assert_eq!(coll_tag(3, 1) & P2P_BIT, 0);
        assert_ne!(p2p_tag(3) & P2P_BIT, 0);
    }
}
