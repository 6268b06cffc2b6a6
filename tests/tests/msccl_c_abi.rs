//! `mscclLoadAlgo` / `mscclRunAlgo` / `mscclUnloadAlgo` through the C ABI of the installed
//! `librccl.so.1` (host backend, 4 ranks in threads): the algorithms of `tests/msccl/` checked
//! element by element, and bad files, handles and counts answered with `ncclInvalidArgument` and
//! a sentence in `ncclGetLastError`.

use libloading::Library;
use oxccl_tests::nccl_lib::{NcclLib, RawComm};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::Path;
use xtask::{Flavour, install, profile_of, workspace_root};

type Load = unsafe extern "C" fn(*const c_char, *mut c_int, c_int) -> c_int;
type Run = unsafe extern "C" fn(
    *const c_void,
    *const usize,
    *const usize,
    *mut c_void,
    *const usize,
    *const usize,
    usize,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    RawComm,
    *mut c_void,
) -> c_int;
type Unload = unsafe extern "C" fn(c_int) -> c_int;
type LastError = unsafe extern "C" fn(RawComm) -> *const c_char;

const N: usize = 4;
const INVALID_ARGUMENT: c_int = 4;
const FLOAT32: c_int = 7;
const INT32: c_int = 2;
const SUM: c_int = 0;
const MAX: c_int = 2;

struct Msccl {
    load: Load,
    run: Run,
    unload: Unload,
    last_error: LastError,
}

fn value(r: usize, i: usize) -> i32 {
    ((r * 5 + i * 11) % 19) as i32 - 9
}

#[derive(Clone, Copy)]
struct SendComm(RawComm);
// SAFETY: an `ncclComm_t` may be used from any thread (one thread per rank here).
unsafe impl Send for SendComm {}

/// Runs handle `h` on every rank for `count`; the outputs of ranks 0..N as i32 values.
fn run_all(
    m: &Msccl,
    comms: &[SendComm],
    h: c_int,
    coll: &str,
    count: usize,
    dt: c_int,
    op: c_int,
) -> Vec<Vec<i32>> {
    let (ilen, olen) = match coll {
        "alltoall" => (N * count, N * count),
        _ => (count, count),
    };
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(r, &c)| {
                s.spawn(move || {
                    let c = c;
                    let send: Vec<u32> = (0..ilen)
                        .map(|i| {
                            let v = value(r, i);
                            if dt == FLOAT32 {
                                (v as f32).to_bits()
                            } else {
                                v as u32
                            }
                        })
                        .collect();
                    let mut recv = vec![0u32; olen];
                    let null = std::ptr::null();
                    // SAFETY: buffers of the sizes the algorithm uses, alive until the call
                    // returned (the host backend completes it before returning).
                    let rc = unsafe {
                        (m.run)(
                            send.as_ptr().cast(),
                            null,
                            null,
                            recv.as_mut_ptr().cast(),
                            null,
                            null,
                            count,
                            dt,
                            0,
                            0,
                            op,
                            h,
                            c.0,
                            std::ptr::null_mut(),
                        )
                    };
                    assert_eq!(rc, 0, "mscclRunAlgo on rank {r}: {}", last(m, c.0));
                    recv.iter()
                        .map(|&b| {
                            if dt == FLOAT32 {
                                f32::from_bits(b) as i32
                            } else {
                                b as i32
                            }
                        })
                        .collect()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn last(m: &Msccl, c: RawComm) -> String {
    // SAFETY: ncclGetLastError returns a NUL-terminated string owned by the library.
    unsafe { CStr::from_ptr((m.last_error)(c)) }
        .to_string_lossy()
        .into_owned()
}

fn load(m: &Msccl, path: &Path) -> (c_int, c_int) {
    let p = CString::new(path.to_str().unwrap()).unwrap();
    let mut h = -1;
    // SAFETY: a NUL-terminated path and a writable handle.
    let rc = unsafe { (m.load)(p.as_ptr(), &mut h, 0) };
    (rc, h)
}

#[test]
fn msccl_algorithms_run_through_the_rccl_c_abi() {
    let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join("msccl-rccl");
    let inst =
        install(&prefix, Flavour::Rccl, profile_of(cfg!(debug_assertions))).expect("install");
    let path = inst.lib_dir.join(Flavour::Rccl.soname());
    // SAFETY: set before the library is loaded; this file's only test, so no other thread reads
    // the environment concurrently.
    unsafe { std::env::set_var("OXCCL_BACKEND", "host") };
    let nccl = NcclLib::load(path.to_str().unwrap()).expect("load librccl.so.1");
    // SAFETY: our own library; the symbols have the types above (checked against rccl.h by the
    // ffi crate's declaration test).
    let (lib, m) = unsafe {
        let lib = Library::new(&path).expect("dlopen");
        let m = Msccl {
            load: *lib.get::<Load>(b"mscclLoadAlgo\0").unwrap(),
            run: *lib.get::<Run>(b"mscclRunAlgo\0").unwrap(),
            unload: *lib.get::<Unload>(b"mscclUnloadAlgo\0").unwrap(),
            last_error: *lib.get::<LastError>(b"ncclGetLastError\0").unwrap(),
        };
        (lib, m)
    };
    let mut raw = vec![std::ptr::null_mut(); N];
    // SAFETY: room for N communicators; NULL device list.
    let rc = unsafe { (nccl.comm_init_all)(raw.as_mut_ptr(), N as c_int, std::ptr::null()) };
    assert_eq!(rc, 0);
    let comms: Vec<SendComm> = raw.iter().map(|&c| SendComm(c)).collect();
    let dir = workspace_root().join("tests/msccl");

    for (file, coll, counts) in [
        ("ring_allreduce_1ch.xml", "allreduce", [4usize, 400]),
        ("ring_allreduce_2ch_deps.xml", "allreduce", [8, 800]),
        ("alltoall.xml", "alltoall", [3, 100]),
    ] {
        let (rc, h) = load(&m, &dir.join(file));
        assert_eq!(rc, 0, "{file}: {}", last(&m, std::ptr::null_mut()));
        for dt in [FLOAT32, INT32] {
            for op in [SUM, MAX] {
                for count in counts {
                    let got = run_all(&m, &comms, h, coll, count, dt, op);
                    for (r, out) in got.iter().enumerate() {
                        for (i, &g) in out.iter().enumerate() {
                            let want = if coll == "alltoall" {
                                value(i / count, r * count + i % count)
                            } else {
                                let v = (0..N).map(|q| value(q, i));
                                if op == MAX { v.max().unwrap() } else { v.sum() }
                            };
                            assert_eq!(
                                g, want,
                                "{file} dt {dt} op {op} count {count} rank {r} element {i}"
                            );
                        }
                    }
                }
            }
        }
        // Count not divisible into the file's chunks.
        let c0 = comms[0].0;
        let buf = [0u32; 64];
        let null = std::ptr::null();
        // SAFETY: refused before any buffer is touched.
        let rc = unsafe {
            (m.run)(
                buf.as_ptr().cast(),
                null,
                null,
                buf.as_ptr() as *mut c_void,
                null,
                null,
                3,
                INT32,
                0,
                0,
                SUM,
                h,
                c0,
                std::ptr::null_mut(),
            )
        };
        if coll != "alltoall" {
            assert_eq!(rc, INVALID_ARGUMENT, "{file}");
            assert!(last(&m, c0).contains("does not divide"), "{}", last(&m, c0));
        }
        // SAFETY: a handle from mscclLoadAlgo.
        assert_eq!(unsafe { (m.unload)(h) }, 0);
        // SAFETY: as above; unloaded now.
        assert_eq!(unsafe { (m.unload)(h) }, INVALID_ARGUMENT);
    }

    // Malformed files.
    let tmp = prefix.join("bad");
    std::fs::create_dir_all(&tmp).unwrap();
    let good = std::fs::read_to_string(dir.join("alltoall.xml")).unwrap();
    for (name, text, says) in [
        (
            "bad_xml.xml",
            good.replacen("</tb>", "", 1),
            "not well-formed XML",
        ),
        (
            "bad_type.xml",
            good.replacen("type=\"cpy\"", "type=\"copy\"", 1),
            "unknown step type \"copy\"",
        ),
        (
            "bad_peer.xml",
            good.replacen("send=\"1\"", "send=\"4\"", 1),
            "send=4 is not a rank",
        ),
    ] {
        let p = tmp.join(name);
        std::fs::write(&p, text).unwrap();
        let (rc, _) = load(&m, &p);
        let msg = last(&m, std::ptr::null_mut());
        assert_eq!(rc, INVALID_ARGUMENT, "{name}: {msg}");
        assert!(msg.contains(name) && msg.contains(says), "{name}: {msg}");
    }
    for c in comms {
        // SAFETY: live communicators from ncclCommInitAll.
        assert_eq!(unsafe { (nccl.comm_destroy)(c.0) }, 0);
    }
    drop(lib);
}
