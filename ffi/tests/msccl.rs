//! MSCCL algorithm files through the Rust API: the test algorithms of `tests/msccl/` on 4
//! thread-ranks of the host backend, checked element by element against a direct reference, and
//! malformed files refused with a sentence.

use oxccl_core::bootstrap::{BootstrapOptions, UniqueId};
use oxccl_core::config::CommConfig;
use oxccl_core::datatype::{DataType, RedOp};
use oxccl_core::{Communicator, Error, HostBackend};
use oxccl_ffi::msccl::{MscclAlgo, run};
use std::path::PathBuf;
use std::sync::Arc;

const N: usize = 4;

fn file(name: &str) -> String {
    let p: PathBuf = [env!("CARGO_MANIFEST_DIR"), "..", "tests", "msccl", name]
        .iter()
        .collect();
    p.to_string_lossy().into_owned()
}

/// Rank `r`'s input value at `i` (small integers, exact in float32, negatives for Max).
fn value(r: usize, i: usize) -> i32 {
    ((r * 7 + i * 13) % 23) as i32 - 11
}

trait Elem: Copy + PartialEq + std::fmt::Debug + Send + Sync + 'static {
    const DT: DataType;
    fn of(v: i32) -> Self;
}
impl Elem for f32 {
    const DT: DataType = DataType::Float32;
    fn of(v: i32) -> f32 {
        v as f32
    }
}
impl Elem for i32 {
    const DT: DataType = DataType::Int32;
    fn of(v: i32) -> i32 {
        v
    }
}

/// What rank `r`'s output must hold.
fn expected(coll: &str, op: RedOp, r: usize, count: usize) -> Vec<i32> {
    match coll {
        "allreduce" => (0..count)
            .map(|i| {
                let vals = (0..N).map(|q| value(q, i));
                match op {
                    RedOp::Max => vals.max().unwrap(),
                    _ => vals.sum(),
                }
            })
            .collect(),
        "alltoall" => (0..N * count)
            .map(|j| value(j / count, r * count + j % count))
            .collect(),
        _ => unreachable!(),
    }
}

/// Runs `algo` on `N` thread-ranks once per (op, count); returns the mismatches.
fn run_algo<T: Elem>(algo: &Arc<MscclAlgo>, ops: &[RedOp], counts: &[usize]) {
    let backend = Arc::new(HostBackend::new());
    let id = UniqueId::generate(&BootstrapOptions::from_env()).expect("unique id");
    std::thread::scope(|s| {
        for rank in 0..N {
            let backend = backend.clone();
            s.spawn(move || {
                let comm =
                    Communicator::init_rank(backend.clone(), N, id, rank, 0, CommConfig::default())
                        .expect("init");
                let stream = backend.stream_create().expect("stream");
                for &op in ops {
                    for &count in counts {
                        let sizes = algo.sizes(count as u64, N).expect("sizes");
                        let send: Vec<T> = (0..sizes.input as usize)
                            .map(|i| T::of(value(rank, i)))
                            .collect();
                        let mut recv = vec![T::of(-99); sizes.output as usize];
                        // SAFETY: both buffers live on this thread until `run` returned, and the
                        // host backend completes the operation before returning.
                        unsafe {
                            run(
                                &comm,
                                algo,
                                send.as_ptr() as u64,
                                recv.as_mut_ptr() as u64,
                                count as u64,
                                T::DT,
                                op,
                                &stream,
                            )
                        }
                        .expect("run");
                        let want: Vec<T> = expected(&algo.coll, op, rank, count)
                            .into_iter()
                            .map(T::of)
                            .collect();
                        for (i, (g, w)) in recv.iter().zip(&want).enumerate() {
                            assert_eq!(
                                g,
                                w,
                                "{} {:?} {op:?} count {count}: rank {rank} element {i}",
                                algo.name,
                                T::DT
                            );
                        }
                    }
                }
                comm.destroy().expect("destroy");
            });
        }
    });
}

fn check_file(name: &str, counts: &[usize]) {
    let algo = Arc::new(MscclAlgo::load(&file(name)).expect("load"));
    let ops = [RedOp::Sum, RedOp::Max];
    run_algo::<f32>(&algo, &ops, counts);
    run_algo::<i32>(&algo, &ops, counts);
}

#[test]
fn ring_allreduce_one_channel() {
    check_file("ring_allreduce_1ch.xml", &[4, 12, 4000]);
}

#[test]
fn ring_allreduce_two_channels_with_dependencies() {
    check_file("ring_allreduce_2ch_deps.xml", &[8, 24, 8000]);
}

#[test]
fn alltoall() {
    check_file("alltoall.xml", &[1, 5, 1000]);
}

fn parse_err(text: &str) -> String {
    match MscclAlgo::parse(text, "bad.xml") {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

const GOOD_2: &str = r#"<algo name="x" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" inplace="0">
  <gpu id="0" i_chunks="2" o_chunks="2" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="1" dstbuf="o" dstoff="-1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="rrc" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="2" type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="-1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="3" type="r" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="2" o_chunks="2" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="-1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="rrc" srcbuf="i" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="2" type="s" srcbuf="o" srcoff="1" dstbuf="o" dstoff="-1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="3" type="r" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"#;

#[test]
fn malformed_files_are_refused_with_a_sentence() {
    let good = MscclAlgo::parse(GOOD_2, "good.xml").expect("the good file parses");
    assert_eq!(good.ngpus(), 2);

    let m = parse_err("<algo ngpus=\"2\"><gpu></algo>");
    assert!(
        m.contains("bad.xml") && m.contains("not well-formed XML"),
        "{m}"
    );

    let m = parse_err(&GOOD_2.replacen("type=\"rrc\"", "type=\"rrx\"", 1));
    assert!(
        m.contains("bad.xml, line 5") && m.contains("unknown step type \"rrx\""),
        "{m}"
    );

    let m = parse_err(&GOOD_2.replacen("send=\"1\"", "send=\"7\"", 1));
    assert!(
        m.contains("line 3") && m.contains("send=7 is not a rank"),
        "{m}"
    );

    let m = parse_err(&GOOD_2.replacen("srcoff=\"1\"", "srcoff=\"2\"", 1));
    assert!(m.contains("outside the buffer"), "{m}");

    // Rank 1 drops its last receive: rank 0's second message is never received.
    let m = parse_err(&GOOD_2.replacen(
        "<step s=\"3\" type=\"r\" srcbuf=\"i\" srcoff=\"-1\" dstbuf=\"o\" dstoff=\"0\" cnt=\"1\" depid=\"-1\" deps=\"-1\" hasdep=\"0\"/>",
        "",
        1,
    ));
    assert!(m.contains("do not pair up"), "{m}");

    // A step depending on a later step of its own thread block.
    let m = parse_err(&GOOD_2.replacen("depid=\"-1\" deps=\"-1\"", "depid=\"0\" deps=\"3\"", 1));
    assert!(m.contains("own later step"), "{m}");

    // Every rank's first send waits for its own first receive: a cycle over all ranks.
    let text = std::fs::read_to_string(file("ring_allreduce_2ch_deps.xml")).unwrap();
    let mut after_tb0 = false;
    let cyclic: Vec<String> = text
        .lines()
        .map(|l| {
            let first = after_tb0;
            after_tb0 = l.contains("<tb id=\"0\"");
            if first {
                l.replace("depid=\"-1\" deps=\"-1\"", "depid=\"1\" deps=\"0\"")
            } else {
                l.to_string()
            }
        })
        .collect();
    let m = parse_err(&cyclic.join("\n"));
    assert!(m.contains("deadlocks"), "{m}");

    let m = parse_err(&GOOD_2.replacen("allreduce", "allscatter", 1));
    assert!(m.contains("coll=\"allscatter\" is not supported"), "{m}");

    let m = parse_err(&GOOD_2.replacen("ngpus=\"2\"", "ngpus=\"3\"", 1));
    assert!(m.contains("3 but the file has 2"), "{m}");

    let m = match good.sizes(3, 2) {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(m.contains("does not divide"), "{m}");
    assert!(good.sizes(4, 3).is_err(), "wrong communicator size");
}
