//! The GroupApi events of the calling thread's open group: as in NCCL, every call of one
//! outermost group hangs under one GroupApi event, started by the group's first call and stopped
//! when the group ended. Unlike NCCL, which raises it on the first call's communicator and hangs
//! the other communicators' calls under it too, each communicator gets its own, so a plugin never
//! sees a parent from another communicator's context.

use super::abi::state;
use super::{Event, Handle, ProfilerContext, Started};
use std::cell::RefCell;

thread_local! {
    /// The open group's GroupApi events, by profiler context.
    static OPEN: RefCell<Vec<(usize, Started)>> = const { RefCell::new(Vec::new()) };
}

impl ProfilerContext {
    /// The GroupApi event a call of the calling thread hangs under, `event` describing it when
    /// it must be started. Inside a group (`in_group`) it is the group's, kept until
    /// [`end_group`]; outside a group it is the call's own, returned to stop with the operation.
    pub fn group_api(&self, in_group: bool, event: &Event) -> (Handle, Option<Started>) {
        if !in_group {
            let own = self.start_group_api(event);
            return (own.handle(), Some(own));
        }
        let open = OPEN.with_borrow(|o| {
            o.iter()
                .find(|(c, _)| *c == self.ctx)
                .map(|(_, s)| s.handle())
        });
        if let Some(h) = open {
            return (h, None);
        }
        let started = self.start_group_api(event);
        let h = started.handle();
        if h != 0 {
            OPEN.with_borrow_mut(|o| o.push((self.ctx, started)));
        }
        (h, None)
    }
}

impl ProfilerContext {
    /// Starts a GroupApi event with NCCL's two states: its group start over (now), its
    /// group's end called (just before it stops).
    fn start_group_api(&self, event: &Event) -> Started {
        self.start(event, 0)
            .with_states(state::GROUP_START_API_STOP, state::GROUP_END_API_START)
    }
}

/// Stops the GroupApi events of the calling thread's group, which just ended.
pub fn end_group() {
    let ended = OPEN.try_with(|o| std::mem::take(&mut *o.borrow_mut()));
    // Dropped outside the borrow: stopping calls into the plugin.
    drop(ended);
}
