//! The profiler events of operations (`crate::profiler_plugin`), with NCCL 2.28's parents:
//! - a call raises its API events: the GroupApi event (the open group's, or the call's own
//!   outside a group) and under it the CollApi or P2pApi event, stopped when the call returns;
//! - a launch raises a Group event and, under each operation's API event, its task event (Coll
//!   or P2p, naming the Group event), stopped once the launch returned (the host backend: once
//!   the operations completed), and a KernelLaunch event under the GroupApi event around the
//!   hand-off of the plan to the backend;
//! - once the launch's operations are done (when its task events stop), a KernelCh event per
//!   channel of each task under the task's event, with the channel's start and stop times
//!   (`crate::profiler_plugin::channels`).
//!
//! oxccl launches each collective of a group on its own and a communicator's sends and receives
//! of a group together, so a group raises a Group event per launch where NCCL may raise one.

use super::{CollArgs, Communicator, Connected, PendingP2p, Waiter};
use crate::backend::{Backend, ProxyParents};
use crate::comm::group;
use crate::datatype::DataType;
use crate::error::Result;
use crate::plan::P2pDir;
use crate::plan::{BufId, WorkDesc};
use crate::profiler_plugin::abi::event as bit;
use crate::profiler_plugin::{
    self, ChannelTimes, CollTask, Event, Handle, P2pTask, ProfilerContext, Raiser, Started,
};
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

/// A call's API events, kept with its operation until it launches.
pub(super) struct CallEvents {
    /// The GroupApi event the call hangs under.
    group_api: Handle,
    /// That event when it is the call's own (outside a group): it stops with the operation.
    own_group_api: Option<Started>,
    /// The call's CollApi or P2pApi event (already stopped), the parent of its task event.
    api: Handle,
}

impl CallEvents {
    /// The GroupApi event the call hangs under (0: not raised).
    pub(super) fn group_api(&self) -> Handle {
        self.group_api
    }
}

/// The events of one launch, stopped when this is dropped: first the KernelCh events are
/// raised, then the tasks stop, then the Group event, then the calls' own GroupApi events (the
/// fields' declaration order is the drop order).
pub(super) struct LaunchEvents {
    /// The KernelCh events' state, when they are raised (the tasks are then there).
    channels: Option<KernelChannels>,
    /// The task events, when no KernelCh events are raised.
    tasks: Vec<Started>,
    /// The buffer that is each of `tasks` its own (a send or receive of a group).
    task_buffers: Vec<Option<BufId>>,
    /// Where the NET proxy raises its events, when the plugin asked for them.
    proxy: Option<Raiser>,
    group: Started,
    own_group_apis: Vec<Started>,
}

/// A launch whose tasks raise KernelCh events. Their task events start once the plan is known,
/// as NCCL's do, so that each counts the channels it has KernelCh events for (`nChannels`: a
/// plugin such as NVIDIA's Inspector takes a task as done when that many channels stopped).
struct KernelChannels {
    raiser: Raiser,
    /// The channels' times, set when the plan is handed to the backend.
    times: OnceLock<Arc<ChannelTimes>>,
    tasks: RefCell<Vec<Task>>,
}

/// A task event of a launch with KernelCh events.
struct Task {
    /// The call's API event.
    parent: Handle,
    event: Event,
    /// The buffer that is its own (a send or receive of a group; `None`: every channel).
    buffer: Option<BufId>,
    /// The event, once started.
    started: Option<Started>,
}

impl KernelChannels {
    /// Starts the task events not started yet, counting their channels in `times` when given.
    fn start_tasks(&self, times: Option<&ChannelTimes>) {
        for t in self.tasks.borrow_mut().iter_mut() {
            if t.started.is_none() {
                let n = times.map(|times| times.spans(t.buffer).len() as u32);
                let event = n.map_or(t.event, |n| t.event.with_channels(n));
                t.started = Some(self.raiser.start(&event, t.parent));
            }
        }
    }
}

impl LaunchEvents {
    /// Starts the Group event of a launch and, under it, the task event of each call (with the
    /// buffer that is the task's own, for a send or receive of a group); with KernelCh events,
    /// the task events wait for the plan ([`LaunchProfile::channel_times`]).
    fn start(p: &ProfilerContext, tasks: Vec<(CallEvents, Event, Option<BufId>)>) -> LaunchEvents {
        let group = p.start(&Event::Group, 0);
        let mut out = LaunchEvents {
            channels: None,
            tasks: Vec::with_capacity(tasks.len()),
            task_buffers: Vec::new(),
            proxy: p.wants(bit::PROXY_OP).then(|| p.raiser()),
            own_group_apis: Vec::new(),
            group,
        };
        let mut deferred = Vec::new();
        let kernel_channels = p.wants(bit::KERNEL_CH);
        for (call, task, buffer) in tasks {
            let task = task.under_group(out.group.handle());
            if kernel_channels {
                deferred.push(Task {
                    parent: call.api,
                    event: task,
                    buffer,
                    started: None,
                });
            } else {
                out.tasks.push(p.start(&task, call.api));
                out.task_buffers.push(buffer);
            }
            out.own_group_apis.extend(call.own_group_api);
        }
        out.channels = kernel_channels.then(|| KernelChannels {
            raiser: p.raiser(),
            times: OnceLock::new(),
            tasks: RefCell::new(deferred),
        });
        out
    }

    /// What the launch passes down to where its calls' plan is handed to the backend.
    pub(super) fn profile(&self, group_api: Handle) -> LaunchProfile<'_> {
        LaunchProfile {
            group_api,
            channels: self.channels.as_ref(),
            events: Some(self),
        }
    }
}

impl LaunchEvents {
    /// The KernelCh events of the launch, to raise once its operations completed, taken from
    /// the launch (whose task events then stop without them); `None` without any.
    fn take_kernel_channels(&mut self) -> Option<impl FnOnce() + Send + 'static> {
        let c = self.channels.as_mut()?;
        // Drop then stops the tasks without raising KernelCh events.
        let times = c.times.take()?;
        let tasks: Vec<(Handle, Option<BufId>)> = c
            .tasks
            .get_mut()
            .iter()
            .filter_map(|t| Some((t.started.as_ref()?.handle(), t.buffer)))
            .filter(|t| t.0 != 0)
            .collect();
        let raiser = c.raiser;
        Some(move || {
            for (task, buffer) in tasks {
                raiser.kernel_channels(task, &times.spans(buffer));
            }
        })
    }
}

impl Drop for LaunchEvents {
    fn drop(&mut self) {
        let Some(c) = &self.channels else { return };
        let times = c.times.get();
        // A launch without a kernel (nothing to move, one rank's copy, an error) has task
        // events still, and no channels.
        c.start_tasks(None);
        for t in c.tasks.take() {
            let Some(task) = t.started else { continue };
            if let Some(times) = times
                && task.handle() != 0
            {
                c.raiser
                    .kernel_channels(task.handle(), &times.spans(t.buffer));
            }
            drop(task);
        }
    }
}

/// What a launch passes down to where it hands a plan to the backend: its calls' GroupApi event
/// (the KernelLaunch event's parent; 0: none) and, with KernelCh events, their state.
#[derive(Clone, Copy, Default)]
pub(super) struct LaunchProfile<'a> {
    /// The GroupApi event of the launch's calls (0: none).
    pub group_api: Handle,
    channels: Option<&'a KernelChannels>,
    events: Option<&'a LaunchEvents>,
}

impl LaunchProfile<'_> {
    /// With KernelCh events: the times the backend stamps the channels of the plan `work` in
    /// (`None`: a kernel without a plan, one channel), once the task events started counting
    /// them.
    pub(super) fn channel_times(&self, work: Option<&WorkDesc>) -> Option<Arc<ChannelTimes>> {
        let c = self.channels?;
        let times = Arc::new(work.map_or_else(ChannelTimes::single, ChannelTimes::of));
        c.times.set(times.clone()).ok()?;
        c.start_tasks(Some(&times));
        Some(times)
    }

    /// With proxy events asked for: the launch's task events (started by now) and the buffers
    /// that are their own, for the NET proxy's ProxyOp events.
    pub(super) fn proxy_parents(&self) -> Option<ProxyParents> {
        let events = self.events?;
        let raiser = events.proxy?;
        let tasks = match &events.channels {
            Some(c) => (c.tasks.borrow().iter())
                .map(|t| (t.started.as_ref().map_or(0, Started::handle), t.buffer))
                .collect(),
            None => (events.tasks.iter().map(Started::handle))
                .zip(events.task_buffers.iter().copied())
                .collect(),
        };
        Some(ProxyParents { raiser, tasks })
    }
}

/// Keeps `events` until the launch `r` returned has completed: a synchronous backend's
/// operation completes in its waiter; any other's task events stop when the launch returned,
/// and its KernelCh events are raised once a completion event recorded on `stream` after it
/// says it completed ([`profiler_plugin::completion`]).
pub(super) fn until_done<B: Backend>(
    r: Result<Option<Waiter>>,
    events: Option<LaunchEvents>,
    backend: &Arc<B>,
    stream: &B::Stream,
) -> Result<Option<Waiter>> {
    match (r, events) {
        (Ok(Some(wait)), Some(events)) => Ok(Some(Box::new(move || {
            let r = wait();
            drop(events);
            r
        }))),
        (Ok(None), Some(mut events)) => {
            let timed = (events.channels.as_ref()).is_some_and(|c| c.times.get().is_some());
            if timed
                && let Some(query) = completion_query(backend, stream)
                && let Some(finish) = events.take_kernel_channels()
                && let Some(c) = &events.channels
            {
                c.raiser.when_done(query, Box::new(finish));
            }
            Ok(None)
        }
        (r, _) => r,
    }
}

/// Whether what `stream` has queued so far completed, when the backend can tell.
fn completion_query<B: Backend>(
    backend: &Arc<B>,
    stream: &B::Stream,
) -> Option<profiler_plugin::completion::Query> {
    let event = backend.event_create(stream).ok()?;
    backend.event_record(&event, stream).ok()?;
    let backend = backend.clone();
    Some(Box::new(move || backend.event_query(&event).ok().flatten()))
}

impl<B: Backend> Communicator<B> {
    /// The communicator's profiler context, when a plugin is loaded and it has one.
    fn profiler(&self) -> Option<std::sync::Arc<Connected<B>>> {
        if !profiler_plugin::any_context() {
            return None;
        }
        self.connected().ok().filter(|c| c.profiler.is_some())
    }

    /// Raises the API events of a call on `stream`: `api` describes the call given the stream's
    /// handle and whether it is being captured.
    fn profile_call(
        &self,
        stream: &B::Stream,
        api: impl FnOnce(usize, bool) -> Event,
    ) -> Option<CallEvents> {
        let c = self.profiler()?;
        let p = c.profiler.as_ref()?;
        let backend = &self.inner.backend;
        let captured = backend.is_capturing(stream).unwrap_or(false);
        let handle = backend.stream_id(stream) as usize;
        let depth = group::group_depth();
        // NCCL counts the group each call opens around itself.
        let group_event = Event::GroupApi {
            depth: depth.saturating_add(1),
            graph_captured: captured,
        };
        let (group_api, own_group_api) = p.group_api(depth > 0, &group_event);
        let api = p.start(&api(handle, captured), group_api);
        Some(CallEvents {
            group_api,
            own_group_api,
            api: api.handle(),
        })
    }

    /// Raises the API events of a collective call.
    pub(super) fn profile_coll_call(&self, a: &CollArgs, stream: &B::Stream) -> Option<CallEvents> {
        self.profile_call(stream, |stream, graph_captured| Event::CollApi {
            kind: a.kind,
            count: a.count,
            dtype: a.dtype,
            root: a.root,
            stream,
            graph_captured,
        })
    }

    /// Raises the API events of an `ncclSend` or `ncclRecv` call.
    pub(super) fn profile_p2p_call(
        &self,
        dir: P2pDir,
        count: u64,
        dtype: DataType,
        stream: &B::Stream,
    ) -> Option<CallEvents> {
        self.profile_call(stream, |stream, graph_captured| Event::P2pApi {
            dir,
            count,
            dtype,
            stream,
            graph_captured,
        })
    }

    /// Starts the events of launching the collective `a` of the call `call`: its task event
    /// names the plan's choice, a tuner plugin's included (one-shot kernels aside).
    pub(super) fn profile_coll_launch(
        &self,
        a: &CollArgs,
        call: CallEvents,
    ) -> Option<LaunchEvents> {
        let c = self.profiler()?;
        let bytes = self.message_bytes(a);
        let choice = self
            .steered(&c, a.kind, bytes, a.dtype)
            .unwrap_or_else(|| self.choose(a.kind, bytes, a.dtype, &c.transport));
        let task = Event::Coll(CollTask {
            seq: self.inner.coll_seq.load(Ordering::Relaxed),
            kind: a.kind,
            send: a.send,
            recv: a.recv,
            count: a.count,
            root: a.root,
            dtype: a.dtype,
            n_channels: choice.nchannels,
            algo: choice.algo,
            proto: choice.proto,
            group: 0,
        });
        Some(LaunchEvents::start(
            c.profiler.as_ref()?,
            vec![(call, task, None)],
        ))
    }

    /// Starts the events of launching a communicator's sends and receives together, taking
    /// the API events the calls of `ops` raised.
    pub(super) fn profile_p2p_launch(&self, ops: &mut [PendingP2p<B>]) -> Option<LaunchEvents> {
        let c = self.profiler()?;
        let n_channels = self.p2p_choice(&c).nchannels;
        let tasks = ops
            .iter_mut()
            .enumerate()
            .filter_map(|(i, o)| {
                let task = Event::P2p(P2pTask {
                    dir: o.dir,
                    buff: o.buf,
                    count: o.count,
                    dtype: o.dtype,
                    peer: o.peer,
                    n_channels,
                    group: 0,
                });
                let buffer = BufId(BufId::FIRST_P2P.0.checked_add(u16::try_from(i).ok()?)?);
                Some((o.profile.take()?, task, Some(buffer)))
            })
            .collect();
        Some(LaunchEvents::start(c.profiler.as_ref()?, tasks))
    }

    /// The KernelLaunch event of a launch on `stream` for a call under `group_api` (none when
    /// that was not raised), stopped when the result is dropped.
    pub(super) fn profile_kernel_launch(
        &self,
        c: &Connected<B>,
        group_api: Handle,
        stream: &B::Stream,
    ) -> Started {
        match &c.profiler {
            Some(p) if group_api != 0 => {
                let stream = self.inner.backend.stream_id(stream) as usize;
                p.start(&Event::KernelLaunch { stream }, group_api)
            }
            _ => Started::NONE,
        }
    }
}
