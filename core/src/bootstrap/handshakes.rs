//! The handshakes a listener has in flight, bounded: when full, the oldest is cut off to make
//! room for the newest. A flood of silent connections then cannot lock out a real rank, whose
//! hello arrives within milliseconds of connecting (refusing the newest instead let 1000 idle
//! connections fail a real init: reliability suite T16).

use std::collections::VecDeque;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};

/// Handshakes in flight per listener (bounds its thread count under a connection flood).
pub(crate) const MAX_HANDSHAKES: usize = 256;

#[derive(Default)]
struct Pending {
    next: u64,
    list: VecDeque<(u64, TcpStream)>,
}

/// The handshakes of one listener.
#[derive(Clone, Default)]
pub(crate) struct Handshakes {
    pending: Arc<Mutex<Pending>>,
}

/// One admitted handshake; leaves the set on drop.
pub(crate) struct Admitted {
    id: u64,
    pending: Arc<Mutex<Pending>>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut p = lock(&self.pending);
        if let Some(i) = p.list.iter().position(|(id, _)| *id == self.id) {
            p.list.remove(i);
        }
    }
}

fn lock(m: &Mutex<Pending>) -> MutexGuard<'_, Pending> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Handshakes {
    /// Admits `stream`'s handshake; returns the peer address of the one cut off to make room.
    pub fn admit(&self, stream: &TcpStream) -> (Admitted, Option<String>) {
        let mut p = lock(&self.pending);
        let mut evicted = None;
        if p.list.len() >= MAX_HANDSHAKES
            && let Some((_, old)) = p.list.pop_front()
        {
            // Its handshake thread's read fails at once and the thread ends.
            let _ = old.shutdown(Shutdown::Both);
            evicted = Some(
                old.peer_addr()
                    .map_or_else(|e| e.to_string(), |a| a.to_string()),
            );
        }
        let id = p.next;
        p.next += 1;
        if let Ok(c) = stream.try_clone() {
            p.list.push_back((id, c));
        }
        drop(p);
        (
            Admitted {
                id,
                pending: self.pending.clone(),
            },
            evicted,
        )
    }

    /// Handshakes in flight.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        lock(&self.pending).list.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    #[test]
    fn a_full_set_cuts_off_the_oldest() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let h = Handshakes::default();
        let mut clients = Vec::new();
        let mut admitted = Vec::new();
        let mut first = None;
        for i in 0..MAX_HANDSHAKES + 1 {
            clients.push(TcpStream::connect(addr).unwrap());
            let (s, _) = l.accept().unwrap();
            let (a, evicted) = h.admit(&s);
            assert_eq!(evicted.is_some(), i == MAX_HANDSHAKES);
            if i == 0 {
                first = Some(s);
            }
            admitted.push(a);
        }
        assert_eq!(h.len(), MAX_HANDSHAKES);
        // The oldest was shut down: its reader sees the end at once.
        let mut b = [0u8; 1];
        assert_eq!(first.unwrap().read(&mut b).unwrap(), 0);
        admitted.truncate(10);
        assert!(h.len() <= 10);
    }
}
