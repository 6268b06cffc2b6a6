//! The socket network end to end: two networks of one process, connected over loopback.

use super::*;
use crate::HANDLE_BYTES;
use std::net::Ipv4Addr;
use std::sync::MutexGuard;

fn net(rank: u32, config: SocketConfig) -> SocketNet {
    SocketNet::new(
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        "lo",
        rank,
        SessionKey {
            secret: 0x1234_5679,
            nonce: 7,
        },
        Duration::from_secs(5),
        config,
    )
}

fn connect_pair(config: SocketConfig) -> (SocketNet, SocketNet, SendComm, RecvComm) {
    connect_pair_as(config, config)
}

/// A connection from a network configured as `sender` to one configured as `listener`.
fn connect_pair_as(
    sender: SocketConfig,
    listener: SocketConfig,
) -> (SocketNet, SocketNet, SendComm, RecvComm) {
    let (a, b) = (net(0, sender), net(1, listener));
    let mut h = [0u8; HANDLE_BYTES];
    let mut l = b.listen(0, &mut h).unwrap();
    let s = a.connect(0, &mut h).unwrap().unwrap();
    let r = loop {
        if let Some(r) = b.accept(&mut l).unwrap() {
            break r;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    b.close_listen(l).unwrap();
    (a, b, s, r)
}

fn wait(n: &SocketNet, req: &mut Request) -> Result<usize> {
    loop {
        if let Some(bytes) = n.test(req)? {
            return Ok(bytes);
        }
        std::thread::yield_now();
    }
}

/// Accepts on `l` until the connection is there.
fn accept_now(n: &SocketNet, l: &mut Listen) -> RecvComm {
    loop {
        if let Some(r) = n.accept(l).unwrap() {
            return r;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn send_side(c: &SendComm) -> MutexGuard<'_, SendSide> {
    lock(&c.0.downcast_ref::<SocketSendComm>().unwrap().side)
}

fn recv_side(c: &RecvComm) -> MutexGuard<'_, RecvSide> {
    lock(c.0.downcast_ref::<Arc<Mutex<RecvSide>>>().unwrap())
}

/// Both sides send a `size`-byte message at once and receive the other's; checks that each
/// arrives whole.
fn exchange(
    a: (&SocketNet, &mut SendComm, &mut RecvComm),
    b: (&SocketNet, &mut SendComm, &mut RecvComm),
    size: usize,
) {
    let mh = MemHandle(Box::new(()));
    let msg = |seed: u8| {
        (0..size)
            .map(|i| (i as u8).wrapping_mul(seed))
            .collect::<Vec<u8>>()
    };
    let (ma, mb) = (msg(3), msg(5));
    let (mut ga, mut gb) = (vec![0xeeu8; size], vec![0xeeu8; size]);
    // SAFETY: the buffers outlive the requests, which are waited for below.
    let mut reqs = unsafe {
        [
            (a.0, a.2.irecv_on(a.0, &mut ga, &mh)),
            (b.0, b.2.irecv_on(b.0, &mut gb, &mh)),
            (
                a.0,
                a.0.isend(a.1, ma.as_ptr(), size, 0, &mh).unwrap().unwrap(),
            ),
            (
                b.0,
                b.0.isend(b.1, mb.as_ptr(), size, 0, &mh).unwrap().unwrap(),
            ),
        ]
    };
    for (n, req) in &mut reqs {
        assert_eq!(wait(n, req).unwrap(), size);
    }
    assert!(ga == mb && gb == ma, "{size}-byte messages crossed wrongly");
}

impl RecvComm {
    /// A receive of all of `buf` on this comm of `n`.
    ///
    /// # Safety
    /// `buf` must outlive the request.
    unsafe fn irecv_on(&mut self, n: &SocketNet, buf: &mut [u8], mh: &MemHandle) -> Request {
        // SAFETY: the caller keeps `buf` alive until the request is done.
        unsafe { n.irecv(self, buf.as_mut_ptr(), buf.len(), 0, mh) }
            .unwrap()
            .unwrap()
    }
}

#[test]
fn net_socket_pair_shares_a_control_socket_only_where_both_ends_allow() {
    for (da, db) in [(true, true), (true, false), (false, true), (false, false)] {
        let config = |duplex| SocketConfig {
            nsocks: 2,
            inline_max: 4096,
            min_task: 1024,
            duplex,
            ..SocketConfig::default()
        };
        let (a, b) = (net(0, config(da)), net(1, config(db)));
        let (mut ha, mut hb) = ([0u8; HANDLE_BYTES], [0u8; HANDLE_BYTES]);
        let (mut la, mut lb) = (a.listen(0, &mut ha).unwrap(), b.listen(0, &mut hb).unwrap());
        let mut s_ab = a.connect(0, &mut hb).unwrap().unwrap();
        let mut s_ba = b.connect(0, &mut ha).unwrap().unwrap();
        let mut r_at_a = accept_now(&a, &mut la);
        let mut r_at_b = accept_now(&b, &mut lb);
        a.pair(1, &mut s_ab, &mut r_at_a).unwrap();
        b.pair(0, &mut s_ba, &mut r_at_b).unwrap();
        let both = da && db;
        for shared in [
            send_side(&s_ab).shared,
            send_side(&s_ba).shared,
            recv_side(&r_at_a).shared,
            recv_side(&r_at_b).shared,
        ] {
            assert_eq!(shared, both, "duplex {da}/{db}");
        }
        let local = |c: &TcpStream| c.local_addr().unwrap();
        // Rank 0's connection carries both directions; rank 1 accepted it.
        let a_same = local(&send_side(&s_ab).ctrl) == local(&recv_side(&r_at_a).ctrl);
        let b_same = local(&send_side(&s_ba).ctrl) == local(&recv_side(&r_at_b).ctrl);
        assert_eq!((a_same, b_same), (both, both), "duplex {da}/{db}");
        // Inline, in parts on the data sockets, empty; both ways at once.
        for size in [8, 24, 4097, 100_003, 0] {
            exchange(
                (&a, &mut s_ab, &mut r_at_a),
                (&b, &mut s_ba, &mut r_at_b),
                size,
            );
        }
        // Rank 0 stops sending; its receive side must keep working.
        a.close_send(s_ab).unwrap();
        let mh = MemHandle(Box::new(()));
        let mut got = [0u8; 24];
        let msg = [9u8; 24];
        // SAFETY: `got` and `msg` outlive both requests, waited for here.
        unsafe {
            let mut rq = r_at_a.irecv_on(&a, &mut got, &mh);
            let mut sq = b
                .isend(&mut s_ba, msg.as_ptr(), 24, 0, &mh)
                .unwrap()
                .unwrap();
            assert_eq!(wait(&b, &mut sq).unwrap(), 24);
            assert_eq!(wait(&a, &mut rq).unwrap(), 24);
        }
        assert_eq!(got, msg);
        a.close_recv(r_at_a).unwrap();
        b.close_send(s_ba).unwrap();
        b.close_recv(r_at_b).unwrap();
        a.close_listen(la).unwrap();
        b.close_listen(lb).unwrap();
    }
}

#[test]
fn net_socket_messages_arrive_in_order_inline_and_in_parts() {
    // Parts of at least 64 bytes on 3 lanes (101 and 130 bytes take 2). The sender's own
    // settings differ (as two ranks' environments may): it must cut messages as the
    // listener's handle says, or the lanes' byte streams would not match.
    let config = SocketConfig {
        nsocks: 3,
        inline_max: 100,
        min_task: 64,
        ..SocketConfig::default()
    };
    let own = SocketConfig {
        nsocks: 5,
        inline_max: 4096,
        min_task: 1,
        ..SocketConfig::default()
    };
    let (a, b, mut s, mut r) = connect_pair_as(own, config);
    let mh = MemHandle(Box::new(()));
    let sizes = [0usize, 1, 100, 101, 4096, 130, 100_003, 101, 7, 4097];
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|k| (k * 7 + i) as u8).collect())
        .collect();
    let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0xEEu8; n + 5]).collect();
    let mut rreqs = Vec::new();
    for buf in &mut bufs {
        // SAFETY: `buf` outlives the request, which is waited for below.
        let req = unsafe { b.irecv(&mut r, buf.as_mut_ptr(), buf.len(), 0, &mh) };
        rreqs.push(req.unwrap().unwrap());
    }
    let mut sreqs = Vec::new();
    for m in &msgs {
        // SAFETY: `m` outlives the request, which is waited for below.
        let req = unsafe { a.isend(&mut s, m.as_ptr(), m.len(), 0, &mh) };
        sreqs.push(req.unwrap().unwrap());
    }
    for (i, req) in rreqs.iter_mut().enumerate() {
        assert_eq!(wait(&b, req).unwrap(), sizes[i]);
        assert_eq!(&bufs[i][..sizes[i]], &msgs[i][..]);
        assert!(
            bufs[i][sizes[i]..].iter().all(|&x| x == 0xEE),
            "no byte past the message"
        );
    }
    for (i, req) in sreqs.iter_mut().enumerate() {
        assert_eq!(wait(&a, req).unwrap(), sizes[i]);
    }
    a.close_send(s).unwrap();
    b.close_recv(r).unwrap();
}

/// A link made by `listen_small` has no data sockets (and no helper threads), and carries
/// messages of any size on its control socket.
#[test]
fn net_socket_small_links_carry_everything_on_the_control_socket() {
    let (a, b) = (
        net(0, SocketConfig::default()),
        net(1, SocketConfig::default()),
    );
    let mut h = [0u8; HANDLE_BYTES];
    let mut l = b.listen_small(0, &mut h).unwrap();
    let mut s = a.connect(0, &mut h).unwrap().unwrap();
    let mut r = accept_now(&b, &mut l);
    b.close_listen(l).unwrap();
    assert!(send_side(&s).lanes.is_empty() && recv_side(&r).lanes.is_empty());
    let mh = MemHandle(Box::new(()));
    for size in [0usize, 24, 16 << 10, (1 << 20) + 3] {
        let m: Vec<u8> = (0..size).map(|k| (k * 13 + 1) as u8).collect();
        let mut got = vec![0xEEu8; size + 1];
        // SAFETY: both buffers outlive their requests, waited for below.
        let (mut rq, mut sq) = unsafe {
            (
                b.irecv(&mut r, got.as_mut_ptr(), got.len(), 0, &mh)
                    .unwrap()
                    .unwrap(),
                a.isend(&mut s, m.as_ptr(), size, 0, &mh).unwrap().unwrap(),
            )
        };
        assert_eq!(wait(&b, &mut rq).unwrap(), size);
        assert_eq!(wait(&a, &mut sq).unwrap(), size);
        assert_eq!(&got[..size], &m[..]);
        assert_eq!(got[size], 0xEE, "no byte past the message");
    }
    a.close_send(s).unwrap();
    b.close_recv(r).unwrap();
}

/// A network of two interfaces (two loopback addresses here) has two devices: each listens
/// on its own address, and its connections arrive there.
#[test]
fn net_socket_devices_are_interfaces_each_listening_on_its_address() {
    let two = |rank| {
        SocketNet::on_devices(
            vec![
                (IpAddr::V4(Ipv4Addr::LOCALHOST), "lo".to_string()),
                (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), "lo:2".to_string()),
            ],
            rank,
            SessionKey {
                secret: 0x1234_5679,
                nonce: 7,
            },
            Duration::from_secs(5),
            SocketConfig::default(),
        )
    };
    let (a, b) = (two(0), two(1));
    assert_eq!(b.devices().unwrap(), 2);
    let p = b.properties(1).unwrap();
    assert_eq!((p.name.as_str(), p.guid), ("lo:2", 1));
    assert!(b.properties(2).is_err());
    let mh = MemHandle(Box::new(()));
    for dev in [1, 0] {
        let mut h = [0u8; HANDLE_BYTES];
        let mut l = b.listen(dev, &mut h).unwrap();
        assert_eq!(decode_handle(&h).unwrap().addr.ip(), b.devices[dev].0);
        let mut s = a.connect(dev, &mut h).unwrap().unwrap();
        let mut r = accept_now(&b, &mut l);
        b.close_listen(l).unwrap();
        let local = recv_side(&r).ctrl.local_addr().unwrap().ip();
        assert_eq!(local, b.devices[dev].0);
        let m = [dev as u8 + 1; 100];
        let mut got = [0u8; 100];
        // SAFETY: both buffers outlive their requests, waited for below.
        let (mut rq, mut sq) = unsafe {
            (
                b.irecv(&mut r, got.as_mut_ptr(), got.len(), 0, &mh)
                    .unwrap()
                    .unwrap(),
                a.isend(&mut s, m.as_ptr(), m.len(), 0, &mh)
                    .unwrap()
                    .unwrap(),
            )
        };
        assert_eq!(wait(&b, &mut rq).unwrap(), 100);
        assert_eq!(wait(&a, &mut sq).unwrap(), 100);
        assert_eq!(got, m);
        a.close_send(s).unwrap();
        b.close_recv(r).unwrap();
    }
}

#[test]
fn net_socket_too_large_a_message_is_an_error_not_an_overrun() {
    let (a, b, mut s, mut r) = connect_pair(SocketConfig::default());
    let mh = MemHandle(Box::new(()));
    let mut small = vec![0u8; 4];
    // SAFETY: `small` outlives the request.
    let mut rq = unsafe { b.irecv(&mut r, small.as_mut_ptr(), 4, 0, &mh) }
        .unwrap()
        .unwrap();
    let big = [1u8; 64];
    // SAFETY: `big` outlives the request.
    let mut sq = unsafe { a.isend(&mut s, big.as_ptr(), 64, 0, &mh) }
        .unwrap()
        .unwrap();
    let err = wait(&b, &mut rq).unwrap_err().to_string();
    assert!(err.contains("truncated"), "{err}");
    assert_eq!(small, [0u8; 4]);
    let _ = wait(&a, &mut sq);
}

#[test]
fn net_socket_reset_mid_message_fails_the_receive() {
    let config = SocketConfig {
        nsocks: 2,
        inline_max: 8,
        min_task: 16,
        ..SocketConfig::default()
    };
    let (a, b, mut s, mut r) = connect_pair(config);
    let mh = MemHandle(Box::new(()));
    let mut buf = vec![0u8; 1 << 20];
    // SAFETY: `buf` outlives the request.
    let mut rq = unsafe { b.irecv(&mut r, buf.as_mut_ptr(), buf.len(), 0, &mh) }
        .unwrap()
        .unwrap();
    // Announce a large message, send only its header, then drop the connection.
    {
        let c = downcast::<SocketSendComm>(&mut s.0, "send comm").unwrap();
        let mut side = lock(&c.side);
        side.out.extend(&(1u64 << 20).to_le_bytes());
        side.flush().unwrap();
    }
    a.close_send(s).unwrap();
    let err = wait(&b, &mut rq).unwrap_err().to_string();
    assert!(err.contains("network receive"), "{err}");
}

#[test]
fn net_socket_refuses_a_stranger_without_the_secret() {
    let b = net(1, SocketConfig::default());
    let mut h = [0u8; HANDLE_BYTES];
    let mut l = b.listen(0, &mut h).unwrap();
    let info = decode_handle(&h).unwrap();
    let stranger = SessionKey {
        secret: 1,
        nonce: 7,
    };
    for i in 0..=info.nsocks as u32 {
        let _ = dial(
            info.addr,
            0,
            stranger,
            info.token,
            i,
            Duration::from_secs(2),
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(b.accept(&mut l).unwrap().is_none());
}
