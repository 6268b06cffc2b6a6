//! Opens network plugins as oxccl does (`NCCL_NET_PLUGIN`, `NCCL_NET`), prints what each
//! reports, and moves messages between two communicators of this process over the selected one
//! (each with its own plugin context), checking every byte. For trying a third-party plugin on
//! a machine, e.g. AWS's aws-ofi-nccl with its `env.sh` sourced:
//! `NCCL_DEBUG=INFO net-plugin-probe`.

use oxccl_net::plugin::{PluginLib, PluginNet, select};
use oxccl_net::{CommRef, HANDLE_BYTES, Net, PTR_HOST, RecvComm, SendComm};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn poll<T>(mut step: impl FnMut() -> oxccl_core::Result<Option<T>>) -> Result<T, String> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = step().map_err(|e| e.to_string())? {
            return Ok(v);
        }
        if t0.elapsed() > Duration::from_secs(30) {
            return Err("timed out after 30 s".into());
        }
        std::thread::yield_now();
    }
}

/// The device the transfer uses: `OXCCL_NET_DEVICE`, as the communicators take it, else 0.
fn device() -> usize {
    std::env::var("OXCCL_NET_DEVICE")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn connect(n0: &Arc<dyn Net>, n1: &Arc<dyn Net>) -> Result<(SendComm, RecvComm), String> {
    let mut h = [0u8; HANDLE_BYTES];
    let dev = device();
    let mut l = n1.listen(dev, &mut h).map_err(|e| e.to_string())?;
    let n0c = n0.clone();
    let c = std::thread::spawn(move || poll(|| n0c.connect(dev, &mut h)));
    let r = poll(|| n1.accept(&mut l))?;
    let s = c.join().map_err(|_| "connect thread panicked")??;
    n1.close_listen(l).map_err(|e| e.to_string())?;
    Ok((s, r))
}

/// Sends `sizes` one after another from `n0` to `n1`; returns the seconds taken.
fn transfer(
    n0: &Arc<dyn Net>,
    n1: &Arc<dyn Net>,
    s: &mut SendComm,
    r: &mut RecvComm,
    sizes: &[usize],
) -> Result<f64, String> {
    let max = sizes.iter().copied().max().unwrap_or(0).max(1);
    let mut src: Vec<u8> = (0..max).map(|k| (k * 7 + 3) as u8).collect();
    let mut dst = vec![0u8; max];
    let e = |e: oxccl_core::Error| e.to_string();
    let smh = n0
        .reg_mr(CommRef::Send(s), src.as_mut_ptr(), max, PTR_HOST)
        .map_err(e)?;
    let rmh = n1
        .reg_mr(CommRef::Recv(r), dst.as_mut_ptr(), max, PTR_HOST)
        .map_err(e)?;
    let t0 = Instant::now();
    for (i, &n) in sizes.iter().enumerate() {
        dst[..n].fill(0);
        // SAFETY: `dst` is registered and outlives the request, tested to completion below.
        let mut rq = poll(|| unsafe { n1.irecv(r, dst.as_mut_ptr(), max, 0, &rmh) })?;
        // SAFETY: `src` is registered and outlives the request, tested to completion below.
        let mut sq = poll(|| unsafe { n0.isend(s, src.as_ptr(), n, 0, &smh) })?;
        let (mut sent, mut got) = (None, None);
        let t1 = Instant::now();
        while sent.is_none() || got.is_none() {
            if sent.is_none() {
                sent = n0.test(&mut sq).map_err(e)?;
            }
            if got.is_none() {
                got = n1.test(&mut rq).map_err(e)?;
            }
            if t1.elapsed() > Duration::from_secs(30) {
                return Err(format!("message {i} ({n} bytes) did not complete in 30 s"));
            }
        }
        if got != Some(n) || dst[..n] != src[..n] {
            return Err(format!(
                "message {i}: sent {n} bytes, received {got:?} (or wrong bytes)"
            ));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    n0.dereg_mr(CommRef::Send(s), smh).map_err(e)?;
    n1.dereg_mr(CommRef::Recv(r), rmh).map_err(e)?;
    Ok(secs)
}

fn run() -> Result<(), String> {
    let spec = std::env::var("NCCL_NET_PLUGIN").ok();
    let libs = select::load_all(spec.as_deref());
    if libs.is_empty() {
        return Err(format!(
            "no network plugin loaded (NCCL_NET_PLUGIN={spec:?})"
        ));
    }
    for l in &libs {
        println!("plugin {} v{} from {}", l.name(), l.version(), l.path());
    }
    let want = std::env::var("NCCL_NET").ok();
    let lib: Arc<PluginLib> = libs
        .iter()
        .find(|l| {
            want.as_deref()
                .is_none_or(|w| l.name().eq_ignore_ascii_case(w))
        })
        .cloned()
        .ok_or_else(|| format!("NCCL_NET={want:?} names none of the loaded plugins"))?;
    let a = PluginNet::new(lib.clone(), 1).map_err(|e| e.to_string())?;
    let b = PluginNet::new(lib, 2).map_err(|e| e.to_string())?;
    println!("network {} (ABI v{})", a.name(), a.version());
    for d in 0..a.devices().map_err(|e| e.to_string())? {
        println!(
            "  device {d}: {:?}",
            a.properties(d).map_err(|e| e.to_string())?
        );
    }
    let (n0, n1): (Arc<dyn Net>, Arc<dyn Net>) = (Arc::new(a), Arc::new(b));
    let (mut s, mut r) = connect(&n0, &n1)?;
    let sizes = [0, 1, 7, 4097, (1 << 20) + 3, 4 << 20, 8, 0];
    transfer(&n0, &n1, &mut s, &mut r, &sizes)?;
    println!("sizes {sizes:?}: every byte arrived");
    let big = vec![4 << 20; 64];
    let secs = transfer(&n0, &n1, &mut s, &mut r, &big)?;
    println!(
        "64 x 4 MiB, one at a time: {:.2} GB/s",
        (64 * (4 << 20)) as f64 / secs / 1e9
    );
    n0.close_send(s).map_err(|e| e.to_string())?;
    n1.close_recv(r).map_err(|e| e.to_string())?;
    Ok(())
}

fn main() -> ExitCode {
    oxccl_core::logging::init_from_env();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("net-plugin-probe: {e}");
            ExitCode::FAILURE
        }
    }
}
