//! A communicator's recent plans, kept for reuse. Loops issue one operation again and again, and
//! on device backends building a plan, lowering it and packing its argument block is most of an
//! eager launch's host time. A plan differs from one call to the next only in its steps' tags
//! (derived from sequence numbers), which device executors do not read (they match messages by
//! order), so a backend that says so ([`Backend::reuses_plans`](crate::backend::Backend)) gets the
//! plan kept from an earlier call with an equal key (kept from the second such call on, see
//! [`SEEN`]).

use crate::config::{Env, vars};
use crate::datatype::{DataType, ReduceOp};
use crate::error::Result;
use crate::lock::lock;
use crate::plan::tuner::Choice;
use crate::plan::{CollKind, P2pPlanKey, WorkDesc};
use rustc_hash::{FxBuildHasher, FxHashMap};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

/// Plans kept per communicator. When full it starts again empty: a loop of fewer distinct
/// operations never gets there, and a miss must stay cheap (nccl-tests' first iterations of
/// each size all miss), which rules out finding the least recently used.
const CAPACITY: usize = 64;

/// Keys of the latest misses remembered: a plan is kept only when its key comes back while
/// remembered. Keeping every plan would hold the memory of each one-off operation (nccl-tests'
/// first iterations of each size, a size that changes every call), and a launch that keeps
/// allocating fresh memory pays for its first touch: on 2x H200, misses that kept their plans
/// cost 3-9 us more per rank than building them did.
const SEEN: usize = 64;

/// Plans with more steps are not kept: their messages are large enough that the GPU, not the
/// host, sets the pace, and they would hold much memory.
const MAX_STEPS: usize = 4096;

/// What a collective's plan depends on besides its sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct CollPlanKey {
    pub kind: CollKind,
    pub count: u64,
    pub root: u32,
    pub dtype: DataType,
    /// The combiner and post-division of the lowered reduction (PreMulSum plans are not kept).
    pub reduce: (ReduceOp, Option<u32>),
    pub choice: Choice,
    pub zero_copy: bool,
    pub exposed: bool,
    pub copies_apart: bool,
    /// `Some(overlap rank)` when sends and receives run in channels of their own.
    pub split: Option<Option<u32>>,
}

/// A plan's key: what it was built from, less its sequence numbers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum PlanKey {
    Coll(CollPlanKey),
    P2p(P2pPlanKey),
}

/// Recent plans of one communicator (off: every call builds its plan). Keys are hashed with
/// FxHash: on every launch, where SipHash over a send/receive key cost about 0.3 us.
pub(crate) struct PlanCache {
    on: bool,
    plans: Mutex<Plans>,
}

#[derive(Default)]
struct Plans {
    by_key: FxHashMap<PlanKey, Arc<WorkDesc>>,
    /// Hashes of the latest missed keys, written round-robin.
    seen: Vec<u64>,
    next: usize,
}

impl Plans {
    /// Whether `key` missed recently (and so may come back again); remembers it if not.
    fn missed_before(&mut self, key: &PlanKey) -> bool {
        let h = FxBuildHasher.hash_one(key);
        if self.seen.contains(&h) {
            return true;
        }
        if self.seen.len() < SEEN {
            self.seen.push(h);
        } else {
            self.seen[self.next] = h;
            self.next = (self.next + 1) % SEEN;
        }
        false
    }
}

impl PlanCache {
    /// A cache for a backend that may reuse plans (`reuses`), unless `OXCCL_PLAN_CACHE=0`.
    pub(crate) fn new(reuses: bool) -> PlanCache {
        PlanCache::with(reuses && Env::PROCESS.get(&vars::OXCCL_PLAN_CACHE))
    }

    fn with(on: bool) -> PlanCache {
        PlanCache {
            on,
            plans: Mutex::default(),
        }
    }

    /// The plan kept under `key`, else `build`'s, kept when small enough and its key missed
    /// recently already. `None` keys (plans that depend on more than a key says) are always
    /// built.
    pub(crate) fn get_or_build(
        &self,
        key: impl FnOnce() -> Option<PlanKey>,
        build: impl FnOnce() -> Result<WorkDesc>,
    ) -> Result<Arc<WorkDesc>> {
        let Some(key) = self.on.then(key).flatten() else {
            return build().map(Arc::new);
        };
        let keep = {
            let mut plans = lock(&self.plans);
            if let Some(plan) = plans.by_key.get(&key) {
                return Ok(plan.clone());
            }
            plans.missed_before(&key)
        };
        let plan = Arc::new(build()?);
        if keep && plan.step_count() <= MAX_STEPS {
            let mut plans = lock(&self.plans);
            if plans.by_key.len() >= CAPACITY {
                plans.by_key.clear();
            }
            plans.by_key.insert(key, plan.clone());
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::Reduction;
    use crate::plan::{Algorithm, ChannelWork, Protocol, Step};

    fn key(count: u64) -> Option<PlanKey> {
        Some(PlanKey::Coll(CollPlanKey {
            kind: CollKind::Broadcast,
            count,
            root: 0,
            dtype: DataType::Uint8,
            reduce: (ReduceOp::Sum, None),
            choice: Choice {
                algo: Algorithm::Ring,
                proto: Protocol::Ll,
                nchannels: 1,
                chunk_elems: 1,
            },
            zero_copy: false,
            exposed: false,
            copies_apart: false,
            split: None,
        }))
    }

    fn plan(steps: usize) -> Result<WorkDesc> {
        Ok(WorkDesc {
            kind: CollKind::Broadcast,
            algo: Algorithm::Ring,
            proto: Protocol::Ll,
            dtype: DataType::Uint8,
            reduction: Reduction::none(),
            scratch_elems: 0,
            exposed: false,
            channels: vec![ChannelWork::new(vec![Step::new(1, 0); steps])],
        })
    }

    /// A key's first call builds and forgets its plan, the second builds and keeps it, the
    /// third gets it without building; other keys, `None` keys and a cache that is off build
    /// every time.
    #[test]
    fn a_key_that_comes_back_shares_one_plan() {
        let cache = PlanCache::with(true);
        let a = cache.get_or_build(|| key(8), || plan(2)).unwrap();
        let b = cache.get_or_build(|| key(8), || plan(2)).unwrap();
        assert!(!Arc::ptr_eq(&a, &b), "the first plan was not kept");
        let c = cache
            .get_or_build(|| key(8), || panic!("built again"))
            .unwrap();
        assert!(Arc::ptr_eq(&b, &c));
        let d = cache.get_or_build(|| key(16), || plan(2)).unwrap();
        assert!(!Arc::ptr_eq(&c, &d));
        let e = cache.get_or_build(|| None, || plan(2)).unwrap();
        let f = cache.get_or_build(|| None, || plan(2)).unwrap();
        assert!(!Arc::ptr_eq(&e, &f));
        let off = PlanCache::with(false);
        for _ in 0..3 {
            off.get_or_build(|| key(8), || plan(2)).unwrap();
        }
        assert!(lock(&off.plans).by_key.is_empty());
    }

    /// Only the latest misses are remembered: a key back after `SEEN` others is new again.
    #[test]
    fn misses_are_remembered_for_a_while() {
        let cache = PlanCache::with(true);
        for n in 0..=SEEN as u64 {
            cache.get_or_build(|| key(n), || plan(1)).unwrap();
        }
        cache.get_or_build(|| key(0), || plan(1)).unwrap();
        cache.get_or_build(|| key(SEEN as u64), || plan(1)).unwrap();
        let kept = &lock(&cache.plans).by_key;
        assert!(!kept.contains_key(&key(0).unwrap()));
        assert!(kept.contains_key(&key(SEEN as u64).unwrap()));
    }

    /// When full, the cache starts again empty; plans with too many steps and failed builds
    /// are not kept.
    #[test]
    fn a_full_cache_starts_again() {
        let cache = PlanCache::with(true);
        let twice = |n: u64| {
            for _ in 0..2 {
                cache.get_or_build(|| key(n), || plan(1)).unwrap();
            }
        };
        for n in 0..CAPACITY as u64 {
            twice(n);
        }
        cache.get_or_build(|| key(0), || panic!("kept")).unwrap();
        assert_eq!(lock(&cache.plans).by_key.len(), CAPACITY);
        twice(1000);
        assert_eq!(lock(&cache.plans).by_key.len(), 1);
        cache.get_or_build(|| key(1000), || panic!("kept")).unwrap();

        let cache = PlanCache::with(true);
        for _ in 0..2 {
            cache
                .get_or_build(|| key(1), || plan(MAX_STEPS + 1))
                .unwrap();
            let err = crate::error::Error::Internal("no plan".into());
            assert!(cache.get_or_build(|| key(2), || Err(err)).is_err());
        }
        assert!(lock(&cache.plans).by_key.is_empty());
    }
}
