//! How a large message is cut into parts over a connection's data sockets.

/// The parts of a `size`-byte message: `(offset, length, lane)`, from lane 0.
///
/// Every message starts on lane 0, so the lanes a message needs stay busy and their TCP windows
/// open. Spreading consecutive messages over idle lanes measured worse with NCCL's tuned 16
/// sockets (docs/perf/defaults.md, "Socket parts").
pub(super) fn parts(size: usize, nlanes: usize, min_task: usize) -> Vec<(usize, usize, usize)> {
    let n = nlanes.max(1);
    let per = size.div_ceil(n).max(min_task);
    (0..size)
        .step_by(per.max(1))
        .enumerate()
        .map(|(i, off)| (off, per.min(size - off), i % n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_socket_parts_cover_the_message() {
        for (size, lanes, min) in [(1, 4, 64), (1000, 4, 64), (1 << 20, 4, 1 << 16), (7, 0, 1)] {
            let ps = parts(size, lanes, min);
            let mut at = 0;
            for (i, (off, len, lane)) in ps.iter().enumerate() {
                assert_eq!(*off, at);
                assert_eq!(*lane, i % lanes.max(1));
                at += len;
            }
            assert_eq!(at, size);
            assert!(ps.len() <= lanes.max(1));
        }
    }
}
