//! A channel's sends and receives in two blocks on one FIFO index, so that a rank sends and
//! receives at once (send/receive groups and AlltoAll, from `split_directions_min`).
//!
//! Unordered, the halves run independently: right when no receive writes memory a send of the
//! group still has to read. Ordered (an in-place exchange), a receive never overtakes a send or
//! copy that came before it in the channel's original order: before each run of receives, the
//! receive half waits for a token (a message to self) that the send half sends once everything
//! before the run is done. Sends may still run ahead of receives, which is where the time goes.

#![forbid(unsafe_code)]

use super::tags::order_token_tag;
use super::{Step, TOKEN_BYTES};

/// `steps` of one channel (sends, local copies, receives, in their order) as (send half,
/// receive half); `order` = `Some((rank, fifo))` keeps every receive behind the steps that came
/// before it, with tokens to self (`rank`) tagged for the FIFO index `fifo`. `esize`: element
/// bytes (a token is [`TOKEN_BYTES`] of this rank's buffer table).
pub(crate) fn split_steps(
    steps: Vec<Step>,
    order: Option<(u32, u32)>,
    esize: u64,
) -> (Vec<Step>, Vec<Step>) {
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    let Some((rank, fifo)) = order else {
        for s in steps {
            if s.recv.is_some() {
                recvs.push(s);
            } else {
                sends.push(s);
            }
        }
        return (sends, recvs);
    };
    let tag = order_token_tag(fifo);
    let token = || Step::new((TOKEN_BYTES / esize).max(1), tag);
    // Whether a send or copy came after the last token (or since the start).
    let mut pending = false;
    for s in steps {
        if s.recv.is_none() {
            sends.push(s);
            pending = true;
            continue;
        }
        if pending {
            let mut publish = token().send(rank);
            publish.publish = true;
            sends.push(publish);
            recvs.push(token().recv(rank));
            pending = false;
        }
        recvs.push(s);
    }
    (sends, recvs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Region;

    #[test]
    fn ordered_halves_put_a_token_before_each_run_of_receives() {
        let send = |o| Step::new(4, 9).src(Region::input(o)).send(1);
        let recv = |o| Step::new(4, 9).recv(1).dst(Region::output(o));
        let steps = vec![send(0), recv(0), send(4), send(8), recv(4), recv(8)];
        let (s, r) = split_steps(steps.clone(), None, 4);
        assert_eq!((s.len(), r.len()), (3, 3));
        assert!(s.iter().all(|x| x.send == Some(1)) && r.iter().all(|x| x.recv == Some(1)));
        let (s, r) = split_steps(steps, Some((0, 5)), 4);
        // send(0) token | send(4) send(8) token; token recv(0) | token recv(4) recv(8).
        let is_token = |x: &Step| x.tag == order_token_tag(5);
        assert_eq!(
            s.iter().map(is_token).collect::<Vec<_>>(),
            [false, true, false, false, true]
        );
        assert_eq!(
            r.iter().map(is_token).collect::<Vec<_>>(),
            [true, false, true, false, false]
        );
        assert!(
            s.iter()
                .filter(|x| is_token(x))
                .all(|x| x.publish && x.send == Some(0))
        );
        assert!(
            r.iter()
                .filter(|x| is_token(x))
                .all(|x| x.recv == Some(0) && x.dst.is_none())
        );
        // Receives first need no token; 8-byte elements make one-element tokens.
        let (s, r) = split_steps(vec![recv(0), send(0)], Some((0, 5)), 8);
        assert_eq!((s.len(), r.len()), (1, 1));
        let (s, _) = split_steps(vec![send(0), recv(0)], Some((0, 5)), 8);
        assert_eq!(s[1].count, 1);
    }
}
