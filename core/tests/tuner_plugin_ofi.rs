//! aws-ofi-nccl's tuner plugin (tag v1.21.1, built from its unchanged source by
//! `scripts/plugins/build-ofi-tuner.sh`), named by `OXCCL_OFI_TUNER`. Without the variable it
//! says it skipped: CI has no copy of aws-ofi-nccl's source.
//!
//! Off AWS the tuner stands aside: its init succeeds without a context, and NCCL (oxccl) keeps
//! its own choices. It models a platform only when hwloc's topology holds an Amazon EFA or ENA
//! PCI device (which selects its AWS platform) and the instance type is one it knows; the test
//! gives it both through their own variables: `HWLOC_XMLFILE` (a topology with an EFA device)
//! and `OFI_NCCL_FORCE_PRODUCT_NAME=p5.48xlarge`. `OFI_NCCL_PLATFORM=AWS` does not do it: it
//! only keeps a platform that detection already chose. `OFI_NCCL_TUNER_TYPE=Model` selects its
//! latency-bandwidth model, whose choices follow from its source; its default, the region
//! tuner, reads them from tables of measured regions. Both leave communicators of one or two
//! hosts to NCCL's tuning, so two host ranks keep oxccl's choice, and the model's choices are
//! checked through the plugin's calls for a communicator of 32 ranks on 4 hosts.

mod support;

use oxccl_core::datatype::DataType;
use oxccl_core::plan::{Algorithm, CollKind, Protocol};
use oxccl_core::tuner_plugin::{Steer, process_plugin};

/// One package, one PU and an Amazon EFA device (vendor 1d0f, device efa1) behind a host
/// bridge: enough for the tuner's platform detection.
const EFA_TOPOLOGY: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" allowed_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" allowed_nodeset="0x00000001" gp_index="1">
    <object type="Package" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="2">
      <object type="Core" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="3">
        <object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="4"/>
      </object>
    </object>
    <object type="NUMANode" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="5" local_memory="1073741824"/>
    <object type="Bridge" gp_index="6" bridge_type="0-1" depth="0" bridge_pci="0000:[00-01]">
      <object type="PCIDev" gp_index="7" pci_busid="0000:00:06.0" pci_type="0200 [1d0f:efa1] [0000:0000] 00" pci_link_speed="0.000000"/>
    </object>
  </object>
</topology>
"#;

const ALL: [(Algorithm, Protocol); 6] = support::tuner::RING_AND_TREE;

const KINDS: [CollKind; 3] = [
    CollKind::AllReduce,
    CollKind::AllGather,
    CollKind::ReduceScatter,
];
const SIZES: [u64; 5] = [4 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30];

#[test]
fn ofi_tuner_models_p5_and_leaves_small_communicators() {
    let Some(lib) = std::env::var_os("OXCCL_OFI_TUNER") else {
        eprintln!("SKIPPED: OXCCL_OFI_TUNER names no build of aws-ofi-nccl's tuner");
        return;
    };
    let tmp = std::env::temp_dir();
    let pid = std::process::id();
    let topo = tmp.join(format!("oxccl-ofi-topo-{pid}.xml"));
    let log = tmp.join(format!("oxccl-ofi-tuner-{pid}.log"));
    std::fs::write(&topo, EFA_TOPOLOGY).unwrap();
    // SAFETY: this binary's only test: no other thread reads the environment.
    unsafe {
        std::env::set_var("NCCL_TUNER_PLUGIN", &lib);
        std::env::set_var("HWLOC_XMLFILE", &topo);
        std::env::set_var("OFI_NCCL_FORCE_PRODUCT_NAME", "p5.48xlarge");
        std::env::set_var("OFI_NCCL_TUNER_TYPE", "Model");
        std::env::set_var("NCCL_DEBUG", "INFO");
        std::env::set_var("NCCL_DEBUG_SUBSYS", "INIT,TUNING");
        std::env::set_var("NCCL_DEBUG_FILE", &log);
    }
    oxccl_core::logging::init_from_env();

    // Two host ranks: one host, which the model leaves to oxccl; every choice is one oxccl runs,
    // the same on both ranks.
    let choices = oxccl_core::testing::on_host_ranks(
        2,
        |_| {},
        |_, comm, _| {
            let mut out = Vec::new();
            for kind in KINDS {
                for bytes in SIZES {
                    let c = comm.tuning(kind, bytes, DataType::Float32).unwrap();
                    assert!(c.nchannels > 0, "{kind:?} {bytes}: {c:?}");
                    out.push((c.algo, c.proto, c.nchannels));
                }
            }
            out
        },
    );
    assert_eq!(choices[0], choices[1]);

    let plugin = process_plugin(None, None).expect("the communicators loaded the plugin");
    // v6 (NCCL 2.30's), which it exports beside v3 and v2.
    assert_eq!((plugin.name(), plugin.version()), ("nccl_ofi_tuner", 6));
    let tree_simple = (Algorithm::Tree, Protocol::Simple);

    // What the two ranks saw: a context of 2 ranks on 1 host, left alone at every size.
    let one_host = plugin.context(1, 2, 1, (2, 2)).unwrap();
    for kind in KINDS {
        for bytes in SIZES {
            let s = one_host.steer(kind, bytes, 2, tree_simple, 4, &ALL);
            assert_eq!(s, Steer::default(), "{kind:?} {bytes}");
        }
    }
    drop(one_host);

    // 32 ranks on 4 hosts of p5: the model's cheapest AllReduce (latency plus bytes over
    // bandwidth, its p5 constants, 8 channels): tree/LL to about 2 MB, tree/LL128 to about
    // 66 MB, ring/LL128 to about 676 MB, then ring/Simple. It never picks tree/Simple (oxccl's
    // choice here), so each of its choices shows; it leaves the channel count.
    let four_hosts = plugin.context(2, 32, 4, (8, 8)).unwrap();
    let expect = [
        (4 << 10, Algorithm::Tree, Protocol::Ll),
        (1 << 20, Algorithm::Tree, Protocol::Ll),
        (16 << 20, Algorithm::Tree, Protocol::Ll128),
        (256 << 20, Algorithm::Ring, Protocol::Ll128),
        (1 << 30, Algorithm::Ring, Protocol::Simple),
    ];
    for (bytes, algo, proto) in expect {
        let s = four_hosts.steer(CollKind::AllReduce, bytes, 32, tree_simple, 4, &ALL);
        assert_eq!(
            s,
            Steer {
                algo_proto: Some((algo, proto)),
                nchannels: None
            },
            "AllReduce {bytes}"
        );
    }
    // It models AllReduce only; for AllGather and ReduceScatter it writes the cell before the
    // table (its "no choice" is algorithm -1, protocol -1), which oxccl ignores: its own choice
    // stands.
    for kind in [CollKind::AllGather, CollKind::ReduceScatter] {
        for bytes in SIZES {
            let s = four_hosts.steer(kind, bytes, 32, tree_simple, 4, &ALL);
            assert_eq!(s, Steer::default(), "{kind:?} {bytes}");
        }
    }
    drop(four_hosts);

    // Its p5 quirk: AllReduce of 3-5 GiB over 128 ranks on 16 hosts goes to NVLS tree, which
    // oxccl does not run: oxccl keeps its choice. At 2 GiB the model picks ring/LL128 (ring/Simple
    // only from about 2.8 GB at this scale, its latency being 32 network and 222 NVLink steps).
    let sixteen_hosts = plugin.context(3, 128, 16, (8, 8)).unwrap();
    let s = sixteen_hosts.steer(CollKind::AllReduce, 4 << 30, 128, tree_simple, 4, &ALL);
    assert_eq!(s, Steer::default());
    let s = sixteen_hosts.steer(CollKind::AllReduce, 2 << 30, 128, tree_simple, 4, &ALL);
    assert_eq!(s.algo_proto, Some((Algorithm::Ring, Protocol::Ll128)));
    drop(sixteen_hosts);

    // Its log lines reach oxccl's log (NCCL_DEBUG_FILE).
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&topo);
    for line in [
        "TUNER/Plugin: Using nccl_ofi_tuner (v6)",
        "Model base Tuner is chosen for platform: p5.48xlarge",
        "Model Tuner init (platform 0): comm with 2 ranks and 1 nodes.",
        "Model Tuner init (platform 0): comm with 32 ranks and 4 nodes.",
        "Model Tuner Choosing algo 1 proto 1",
        "Model Tuner Choosing algo 5 proto 2",
        "Model Tuner Choosing algo -1 proto -1 with cost 0.00000000 µsecs for coll 2 size 4096.",
    ] {
        assert!(text.contains(line), "no {line:?} in the log:\n{text}");
    }
}
