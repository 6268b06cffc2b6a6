//! T2 for the other functions: init, queries, split, shrink, operators, AlltoAllv, memory.

use crate::helpers::{FLOAT32, NO_STREAM, Table, unique_id};
use oxccl_ffi::abi::ncclResult_t as R;
use oxccl_ffi::abi::{ncclComm, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclScalarResidence_t};
use oxccl_ffi::api::*;
use std::ffi::{c_int, c_void};

/// NULL out-pointers, NULL communicators and bad arguments of the functions other than
/// collectives, on the live one-rank `comm`.
pub(crate) fn other_functions_table(t: &mut Table, comm: ncclComm_t) {
    let id = unique_id();
    let mut v: c_int = 0;
    let mut ptr: *mut c_void = std::ptr::null_mut();
    let mut buf = [0f32; 16];
    let garbage = ncclComm_t(0x5a5a_5a5a as *mut ncclComm);
    let ia = R::INVALID_ARGUMENT;
    // SAFETY: (every call below) each pointer is NULL (the case) or valid for the call.
    unsafe {
        t.case(
            "ncclGetVersion(NULL)",
            "ncclGetVersion",
            ia,
            &["NULL"],
            || ncclGetVersion(std::ptr::null_mut()),
        );
        t.case(
            "ncclGetUniqueId(NULL)",
            "ncclGetUniqueId",
            ia,
            &["NULL"],
            || ncclGetUniqueId(std::ptr::null_mut()),
        );
        t.case(
            "ncclCommInitRank NULL out",
            "ncclCommInitRank",
            ia,
            &["comm", "NULL"],
            || ncclCommInitRank(std::ptr::null_mut(), 1, id, 0),
        );
        t.case(
            "ncclCommInitRankConfig NULL out",
            "ncclCommInitRankConfig",
            ia,
            &["NULL"],
            || ncclCommInitRankConfig(std::ptr::null_mut(), 1, id, 0, std::ptr::null_mut()),
        );
        t.case(
            "ncclCommInitRankScalable NULL out",
            "ncclCommInitRankScalable",
            ia,
            &["NULL"],
            || {
                let mut ids = [id];
                ncclCommInitRankScalable(
                    std::ptr::null_mut(),
                    1,
                    0,
                    1,
                    ids.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
        );
        t.case(
            "ncclCommInitRankScalable NULL ids",
            "ncclCommInitRankScalable",
            ia,
            &["commIds"],
            || {
                let mut c = ncclComm_t::NULL;
                ncclCommInitRankScalable(
                    &mut c,
                    1,
                    0,
                    1,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            },
        );
        for n_id in [0, -1, c_int::MIN] {
            t.case(
                &format!("ncclCommInitRankScalable nId {n_id}"),
                "ncclCommInitRankScalable",
                ia,
                &["nId"],
                || {
                    let mut c = ncclComm_t::NULL;
                    let mut ids = [id];
                    ncclCommInitRankScalable(
                        &mut c,
                        1,
                        0,
                        n_id,
                        ids.as_mut_ptr(),
                        std::ptr::null_mut(),
                    )
                },
            );
        }
        t.case(
            "ncclCommInitAll NULL out",
            "ncclCommInitAll",
            ia,
            &["NULL"],
            || ncclCommInitAll(std::ptr::null_mut(), 1, std::ptr::null()),
        );
        for ndev in [0, -1, c_int::MIN] {
            t.case(
                &format!("ncclCommInitAll ndev {ndev}"),
                "ncclCommInitAll",
                ia,
                &["devices"],
                || {
                    let mut c = [ncclComm_t::NULL; 1];
                    ncclCommInitAll(c.as_mut_ptr(), ndev, std::ptr::null())
                },
            );
        }
        for dev in [-1, 1 << 20, c_int::MAX, c_int::MIN] {
            t.case(
                &format!("ncclCommInitAll device {dev}"),
                "ncclCommInitAll",
                ia,
                &["device"],
                || {
                    let mut c = [ncclComm_t::NULL; 1];
                    ncclCommInitAll(c.as_mut_ptr(), 1, [dev].as_ptr())
                },
            );
        }
        // Queries: NULL out-pointer on a live comm, then a NULL and a never-issued comm.
        type Query = unsafe extern "C" fn(ncclComm_t, *mut c_int) -> R;
        let queries: [(&str, Query); 3] = [
            ("ncclCommCount", ncclCommCount),
            ("ncclCommCuDevice", ncclCommCuDevice),
            ("ncclCommUserRank", ncclCommUserRank),
        ];
        for (api, q) in queries {
            t.case(&format!("{api} NULL out"), api, ia, &["NULL"], || {
                q(comm, std::ptr::null_mut())
            });
            t.case(&format!("{api} NULL comm"), api, ia, &["comm"], || {
                q(ncclComm_t::NULL, &mut v)
            });
            t.case(
                &format!("{api} garbage comm"),
                api,
                ia,
                &["not a communicator"],
                || q(garbage, &mut v),
            );
        }
        t.case(
            "ncclCommGetAsyncError NULL out",
            "ncclCommGetAsyncError",
            ia,
            &["NULL"],
            || ncclCommGetAsyncError(comm, std::ptr::null_mut()),
        );
        t.case(
            "ncclCommGetAsyncError NULL comm",
            "ncclCommGetAsyncError",
            ia,
            &["comm"],
            || {
                let mut e = R::SUCCESS;
                ncclCommGetAsyncError(ncclComm_t::NULL, &mut e)
            },
        );
        // Split: NULL out, bad colours, NULL parent.
        t.case(
            "ncclCommSplit NULL out",
            "ncclCommSplit",
            ia,
            &["newcomm", "NULL"],
            || ncclCommSplit(comm, 0, 0, std::ptr::null_mut(), std::ptr::null_mut()),
        );
        for color in [-2, -1000, c_int::MIN] {
            t.case(
                &format!("ncclCommSplit color {color}"),
                "ncclCommSplit",
                ia,
                &["color"],
                || {
                    let mut c = ncclComm_t::NULL;
                    ncclCommSplit(comm, color, 0, &mut c, std::ptr::null_mut())
                },
            );
        }
        t.case(
            "ncclCommSplit NULL comm",
            "ncclCommSplit",
            ia,
            &["comm"],
            || {
                let mut c = ncclComm_t::NULL;
                ncclCommSplit(ncclComm_t::NULL, 0, 0, &mut c, std::ptr::null_mut())
            },
        );
        t.case(
            "ncclCommShrink NULL out",
            "ncclCommShrink",
            ia,
            &["NULL"],
            || {
                ncclCommShrink(
                    comm,
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                )
            },
        );
        t.case(
            "ncclCommShrink count -1",
            "ncclCommShrink",
            ia,
            &["excludeRanksCount"],
            || {
                let mut c = ncclComm_t::NULL;
                ncclCommShrink(
                    comm,
                    std::ptr::null_mut(),
                    -1,
                    &mut c,
                    std::ptr::null_mut(),
                    0,
                )
            },
        );
        t.case(
            "ncclCommShrink NULL list",
            "ncclCommShrink",
            ia,
            &["excludeRanksList"],
            || {
                let mut c = ncclComm_t::NULL;
                ncclCommShrink(
                    comm,
                    std::ptr::null_mut(),
                    2,
                    &mut c,
                    std::ptr::null_mut(),
                    0,
                )
            },
        );
        for rk in [5, -1, c_int::MAX] {
            t.case(
                &format!("ncclCommShrink exclude {rk}"),
                "ncclCommShrink",
                ia,
                &["out of range"],
                || {
                    let mut c = ncclComm_t::NULL;
                    let mut list = [rk];
                    ncclCommShrink(comm, list.as_mut_ptr(), 1, &mut c, std::ptr::null_mut(), 0)
                },
            );
        }
        // Reduction operators.
        let mut op = ncclRedOp_t(0);
        let scalar: *mut c_void = (&mut buf[0] as *mut f32).cast();
        t.case(
            "ncclRedOpCreatePreMulSum NULL op",
            "ncclRedOpCreatePreMulSum",
            ia,
            &["NULL"],
            || {
                ncclRedOpCreatePreMulSum(
                    std::ptr::null_mut(),
                    scalar,
                    FLOAT32,
                    ncclScalarResidence_t(1),
                    comm,
                )
            },
        );
        t.case(
            "ncclRedOpCreatePreMulSum NULL scalar",
            "ncclRedOpCreatePreMulSum",
            ia,
            &["scalar"],
            || {
                ncclRedOpCreatePreMulSum(
                    &mut op,
                    std::ptr::null_mut(),
                    FLOAT32,
                    ncclScalarResidence_t(1),
                    comm,
                )
            },
        );
        for dt in [-1, 12, c_int::MAX] {
            t.case(
                &format!("ncclRedOpCreatePreMulSum datatype {dt}"),
                "ncclRedOpCreatePreMulSum",
                ia,
                &["data type"],
                || {
                    ncclRedOpCreatePreMulSum(
                        &mut op,
                        scalar,
                        ncclDataType_t(dt),
                        ncclScalarResidence_t(1),
                        comm,
                    )
                },
            );
        }
        for res in [-1, 2, c_int::MAX] {
            t.case(
                &format!("ncclRedOpCreatePreMulSum residence {res}"),
                "ncclRedOpCreatePreMulSum",
                ia,
                &["residence"],
                || {
                    ncclRedOpCreatePreMulSum(
                        &mut op,
                        scalar,
                        FLOAT32,
                        ncclScalarResidence_t(res),
                        comm,
                    )
                },
            );
        }
        t.case(
            "ncclRedOpCreatePreMulSum NULL comm",
            "ncclRedOpCreatePreMulSum",
            ia,
            &["comm"],
            || {
                ncclRedOpCreatePreMulSum(
                    &mut op,
                    scalar,
                    FLOAT32,
                    ncclScalarResidence_t(1),
                    ncclComm_t::NULL,
                )
            },
        );
        for o in [0, 4, -1, 5, 77, c_int::MAX, c_int::MIN] {
            t.case(
                &format!("ncclRedOpDestroy op {o}"),
                "ncclRedOpDestroy",
                ia,
                &[],
                || ncclRedOpDestroy(ncclRedOp_t(o), comm),
            );
        }
        t.case(
            "ncclRedOpDestroy NULL comm",
            "ncclRedOpDestroy",
            ia,
            &["comm"],
            || ncclRedOpDestroy(ncclRedOp_t(5), ncclComm_t::NULL),
        );
        // AlltoAllv (one entry per rank: one here): NULL arrays, bad type, counts and
        // displacements whose sum or byte size overflows.
        let one = [1usize];
        let zero = [0usize];
        let arrays: [(&str, *const usize); 2] = [("NULL", std::ptr::null()), ("ok", one.as_ptr())];
        for (k, name) in ["sendcounts", "sdispls", "recvcounts", "rdispls"]
            .iter()
            .enumerate()
        {
            let pick = |i: usize| if i == k { arrays[0].1 } else { arrays[1].1 };
            let (sp, rp) = (
                buf.as_ptr().cast::<c_void>(),
                buf.as_mut_ptr().cast::<c_void>(),
            );
            t.case(
                &format!("ncclAlltoAllv NULL {name}"),
                "ncclAlltoAllv",
                ia,
                &[name, "NULL"],
                || {
                    ncclAlltoAllv(
                        sp,
                        pick(0),
                        pick(1),
                        rp,
                        pick(2),
                        pick(3),
                        FLOAT32,
                        comm,
                        NO_STREAM,
                    )
                },
            );
        }
        let huge: [(&str, [usize; 1], [usize; 1]); 4] = [
            ("count SIZE_MAX", [usize::MAX], zero),
            ("count SIZE_MAX/4+1", [usize::MAX / 4 + 1], zero),
            ("displacement SIZE_MAX", one, [usize::MAX]),
            (
                "count + displacement past PTRDIFF_MAX",
                [1 << 61],
                [1 << 61],
            ),
        ];
        for (what, counts, displs) in huge {
            for side in ["send", "recv"] {
                let (sp, rp) = (
                    buf.as_ptr().cast::<c_void>(),
                    buf.as_mut_ptr().cast::<c_void>(),
                );
                let (sc, sd, rc, rd) = if side == "send" {
                    (
                        counts.as_ptr(),
                        displs.as_ptr(),
                        one.as_ptr(),
                        zero.as_ptr(),
                    )
                } else {
                    (
                        one.as_ptr(),
                        zero.as_ptr(),
                        counts.as_ptr(),
                        displs.as_ptr(),
                    )
                };
                t.case(
                    &format!("ncclAlltoAllv {side} {what}"),
                    "ncclAlltoAllv",
                    ia,
                    &["overflows"],
                    || ncclAlltoAllv(sp, sc, sd, rp, rc, rd, FLOAT32, comm, NO_STREAM),
                );
            }
        }
        t.case(
            "ncclAlltoAllv datatype 12",
            "ncclAlltoAllv",
            ia,
            &["data type"],
            || {
                let (sp, rp) = (
                    buf.as_ptr().cast::<c_void>(),
                    buf.as_mut_ptr().cast::<c_void>(),
                );
                ncclAlltoAllv(
                    sp,
                    one.as_ptr(),
                    zero.as_ptr(),
                    rp,
                    one.as_ptr(),
                    zero.as_ptr(),
                    ncclDataType_t(12),
                    comm,
                    NO_STREAM,
                )
            },
        );
        t.case(
            "ncclAlltoAllv NULL comm",
            "ncclAlltoAllv",
            ia,
            &["comm"],
            || {
                let (sp, rp) = (
                    buf.as_ptr().cast::<c_void>(),
                    buf.as_mut_ptr().cast::<c_void>(),
                );
                ncclAlltoAllv(
                    sp,
                    one.as_ptr(),
                    zero.as_ptr(),
                    rp,
                    one.as_ptr(),
                    zero.as_ptr(),
                    FLOAT32,
                    ncclComm_t::NULL,
                    NO_STREAM,
                )
            },
        );
        // Memory and registration.
        t.case(
            "ncclMemAlloc NULL out",
            "ncclMemAlloc",
            ia,
            &["NULL"],
            || ncclMemAlloc(std::ptr::null_mut(), 16),
        );
        t.case(
            "ncclCommRegister NULL handle",
            "ncclCommRegister",
            ia,
            &["NULL"],
            || ncclCommRegister(comm, buf.as_mut_ptr().cast(), 64, std::ptr::null_mut()),
        );
        t.case(
            "ncclCommRegister NULL buffer",
            "ncclCommRegister",
            ia,
            &["NULL"],
            || ncclCommRegister(comm, std::ptr::null_mut(), 64, &mut ptr),
        );
        t.case(
            "ncclCommRegister NULL comm",
            "ncclCommRegister",
            ia,
            &["comm"],
            || ncclCommRegister(ncclComm_t::NULL, buf.as_mut_ptr().cast(), 64, &mut ptr),
        );
        // Unbalanced group calls with nothing open.
        t.case(
            "ncclGroupEnd without ncclGroupStart",
            "ncclGroupEnd",
            R::INVALID_USAGE,
            &["ncclGroupStart"],
            || ncclGroupEnd(),
        );
    }
}
