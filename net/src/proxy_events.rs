//! The profiler events of the NET proxy: a ProxyOp event per task and connection, a ProxyStep
//! event per FIFO slot the network moves for it, and, under a step, the NetPlugin events a v10+
//! net plugin raises through its profiler callback, as NCCL's proxy raises them.
//!
//! The proxy follows FIFO counters and knows nothing of operations, so each eager launch tells
//! it, per NET connection its plan uses, how many slots each of its tasks moves there
//! ([`ProxyEvents::post`]); a connection's operations use its slots in launch order, so the
//! proxy finds a slot's task by counting. Slots no posted task covers raise nothing. A launch
//! captured into a CUDA graph replays without telling anyone, which would shift every count
//! after it: the first such launch turns the connections' events off for good
//! ([`ProxyEvents::disable`]).
//!
//! Steps start when their request is posted (a receive posted before its launch told the proxy
//! about it starts once it has) and stop when the network is done with the slot: a send's step
//! records `SendGPUWait` and `SendPeerWait` as it starts (the kernel has filled the slot by
//! then, and sockets need no clear-to-send) and `SendWait` with its size as it is posted; a
//! receive's records `RecvWait` as it is posted, `RecvFlushWait` while a GPU flush runs and
//! `RecvGPUWait` with the received size when it lands. A ProxyOp event stops with its last
//! step.

use oxccl_core::lock::lock;
use oxccl_core::profiler_plugin::abi::state;
use oxccl_core::profiler_plugin::{Event, Handle, Raiser};
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Where the proxy's events go: a communicator's profiler plugin ([`Raiser`]), or a test's
/// recorder.
pub trait ProxyEventSink: Send + Sync {
    /// Starts `event` under `parent`; 0 when it was not raised.
    fn start(&self, event: &Event, parent: Handle) -> Handle;
    /// Records `state` (with the state argument `arg`) of a started event.
    fn record(&self, handle: Handle, state: c_int, arg: Option<u64>);
    /// Stops a started event.
    fn stop(&self, handle: Handle);
}

impl ProxyEventSink for Raiser {
    fn start(&self, event: &Event, parent: Handle) -> Handle {
        self.start_raw(event, parent)
    }
    fn record(&self, handle: Handle, state: c_int, arg: Option<u64>) {
        Raiser::record(self, handle, state, arg);
    }
    fn stop(&self, handle: Handle) {
        Raiser::stop(self, handle);
    }
}

/// One NET connection of a communicator, as launches and the proxy name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnKey {
    /// The FIFO channel.
    pub channel: u32,
    /// The peer rank.
    pub peer: u32,
    /// The sending side (else the receiving one).
    pub send: bool,
    /// The LL link (else the Simple FIFO).
    pub ll: bool,
}

/// One task's share of a connection in a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyTask {
    /// The connection.
    pub conn: ConnKey,
    /// The task event the ProxyOp event hangs under (0: the task was not raised).
    pub parent: Handle,
    /// Slots the task moves through the connection.
    pub slots: u64,
    /// Bytes of one slot.
    pub chunk_bytes: u64,
}

/// A task's slots of one connection, placed in the connection's slot sequence.
#[derive(Debug, Clone, Copy)]
struct Placed {
    parent: Handle,
    first: u64,
    end: u64,
    chunk_bytes: u64,
}

#[derive(Default)]
struct Queues {
    /// Where each connection's next task starts.
    next: HashMap<ConnKey, u64>,
    /// Tasks not yet reached by the proxy, oldest first.
    tasks: HashMap<ConnKey, VecDeque<Placed>>,
}

/// What launches tell a communicator's proxy threads about the tasks of its NET connections.
#[derive(Default)]
pub struct ProxyEvents {
    /// Some launch posted tasks and none was captured: the proxy threads look for events.
    on: AtomicBool,
    /// A captured launch turned the events off.
    off: AtomicBool,
    sink: Mutex<Option<Arc<dyn ProxyEventSink>>>,
    queues: Mutex<Queues>,
}

impl ProxyEvents {
    /// Places a launch's `tasks` after those posted before, their events to go to `sink`.
    /// Every eager launch of the communicator posts, including those whose tasks moved
    /// nothing, so that the counts stay aligned with the kernels'.
    pub fn post(&self, sink: &Arc<dyn ProxyEventSink>, tasks: &[ProxyTask]) {
        if self.off.load(Ordering::Relaxed) {
            return;
        }
        lock(&self.sink).get_or_insert_with(|| sink.clone());
        let mut q = lock(&self.queues);
        for t in tasks.iter().filter(|t| t.slots > 0) {
            let next = q.next.entry(t.conn).or_insert(0);
            let first = *next;
            *next += t.slots;
            q.tasks.entry(t.conn).or_default().push_back(Placed {
                parent: t.parent,
                first,
                end: first + t.slots,
                chunk_bytes: t.chunk_bytes,
            });
        }
        drop(q);
        self.on.store(true, Ordering::Release);
    }

    /// Turns the events off for good: a launch was captured into a graph, whose replays move
    /// slots no launch posts.
    pub fn disable(&self) {
        if !self.off.swap(true, Ordering::AcqRel) {
            self.on.store(false, Ordering::Release);
            lock(&self.queues).tasks.clear();
            tracing::info!(target: "oxccl::net",
                "profiler: an operation over the network was captured into a graph; the proxy raises no more ProxyOp/ProxyStep events on this communicator");
        }
    }

    fn active(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// The oldest task of `conn` that ends after slot `pos`, dropping those before it.
    fn task_at(&self, conn: ConnKey, pos: u64) -> Option<Placed> {
        let mut q = lock(&self.queues);
        let tasks = q.tasks.get_mut(&conn)?;
        while let Some(t) = tasks.front() {
            if t.end > pos {
                return Some(*t);
            }
            tasks.pop_front();
        }
        None
    }

    /// Forgets the oldest task of `conn` (the proxy has begun it).
    fn pop(&self, conn: ConnKey) {
        if let Some(tasks) = lock(&self.queues).tasks.get_mut(&conn) {
            tasks.pop_front();
        }
    }

    fn sink(&self) -> Option<Arc<dyn ProxyEventSink>> {
        lock(&self.sink).clone()
    }
}

/// What a v10+ net plugin's profiler callback gets as `pHandle`: the step its events hang
/// under. Boxed, so that its address stays put until the step's request is done.
pub struct NetStepRef {
    sink: Arc<dyn ProxyEventSink>,
    step: Handle,
}

/// The task whose slots' steps the proxy is starting on one connection.
struct OpTrack {
    handle: Handle,
    task: Placed,
}

/// A slot with a step event.
struct StepTrack {
    handle: Handle,
    /// Its ProxyOp event, stopped with the step when this is the task's last slot.
    op: Handle,
    last: bool,
    net: Option<Box<NetStepRef>>,
}

/// One connection's events, kept by the proxy thread that drives it.
pub(crate) struct ConnEvents {
    conn: ConnKey,
    shared: Arc<ProxyEvents>,
    sink: Option<Arc<dyn ProxyEventSink>>,
    /// Slots below this have had their step started (or were covered by no task).
    next: u64,
    /// Slots posted so far.
    posted: u64,
    /// Slots from `next` on that the network finished before a task covered them: their sizes.
    early: VecDeque<u64>,
    /// The task the next steps belong to.
    cur: Option<OpTrack>,
    /// Steps of slots `next - steps.len()` .. `next`, not yet stopped.
    steps: VecDeque<StepTrack>,
}

impl ConnEvents {
    /// The events of connection `conn`, told about tasks through `shared`.
    pub(crate) fn new(conn: ConnKey, shared: Arc<ProxyEvents>) -> ConnEvents {
        ConnEvents {
            conn,
            shared,
            sink: None,
            next: 0,
            posted: 0,
            early: VecDeque::new(),
            cur: None,
            steps: VecDeque::new(),
        }
    }

    /// Whether a launch has posted tasks (the proxy's check on every pass).
    pub(crate) fn active(&self) -> bool {
        self.shared.active()
    }

    /// Before the request of slot `pos` is posted: starts the steps up to it that a task
    /// covers; the `pHandle` for the net plugin (null: none).
    pub(crate) fn before_post(&mut self, pos: u64) -> *mut c_void {
        self.catch_up(pos + 1);
        if pos + 1 == self.next
            && let Some(s) = self.steps.back_mut()
            && let Some(r) = s.net.as_mut()
        {
            return (&mut **r as *mut NetStepRef).cast();
        }
        std::ptr::null_mut()
    }

    /// The request of slot `pos` was posted (`size`: bytes sent; `None`: a receive).
    pub(crate) fn posted(&mut self, pos: u64, size: Option<u64>) {
        self.posted = self.posted.max(pos + 1);
        if pos + 1 != self.next {
            return;
        }
        let (Some(sink), Some(s)) = (&self.sink, self.steps.back()) else {
            return;
        };
        match size {
            Some(bytes) => sink.record(s.handle, state::PROXY_STEP_SEND_WAIT, Some(bytes)),
            None => sink.record(s.handle, state::PROXY_STEP_RECV_WAIT, None),
        }
    }

    /// A receive's GPU flush started for slot `pos`.
    pub(crate) fn flushing(&mut self, pos: u64) {
        if let (Some(sink), Some(s)) = (&self.sink, self.step_of(pos)) {
            sink.record(s.handle, state::PROXY_STEP_RECV_FLUSH_WAIT, None);
        }
    }

    /// The network is done with slot `pos` (the oldest unfinished), which moved `bytes`.
    pub(crate) fn completed(&mut self, pos: u64, bytes: u64) {
        if pos >= self.next {
            self.early.push_back(bytes);
            // A receive completes only after it was posted: a task may cover it by now.
            self.catch_up(self.posted);
            return;
        }
        if self.step_of(pos).is_none() {
            return;
        }
        let step = self.steps.pop_front().expect("step_of found it");
        if let Some(sink) = &self.sink {
            if !self.conn.send {
                sink.record(step.handle, state::PROXY_STEP_RECV_GPU_WAIT, Some(bytes));
            }
            sink.stop(step.handle);
            if step.last {
                sink.stop(step.op);
            }
        }
    }

    /// The step of slot `pos`, when it has one still open.
    fn step_of(&self, pos: u64) -> Option<&StepTrack> {
        let first = self.next.checked_sub(self.steps.len() as u64)?;
        self.steps.get(pos.checked_sub(first)? as usize)
    }

    /// Starts the steps of slots `next` .. `upto` that posted tasks cover.
    fn catch_up(&mut self, upto: u64) {
        while self.next < upto {
            let task = match &self.cur {
                Some(op) => op.task,
                None => {
                    if self.sink.is_none() {
                        self.sink = self.shared.sink();
                    }
                    let Some(task) = self.shared.task_at(self.conn, self.next) else {
                        return;
                    };
                    task
                }
            };
            let Some(sink) = self.sink.clone() else {
                return;
            };
            if task.first > self.next {
                // Slots no task covers (moved before the events began): nothing to raise.
                let skip = task.first.min(upto) - self.next;
                self.next += skip;
                let drained = (skip as usize).min(self.early.len());
                self.early.drain(..drained);
                continue;
            }
            let op = match &self.cur {
                Some(op) => op.handle,
                None => {
                    self.shared.pop(self.conn);
                    let event = Event::ProxyOp {
                        channel: self.conn.channel,
                        peer: self.conn.peer,
                        n_steps: (task.end - task.first) as u32,
                        chunk_size: task.chunk_bytes as u32,
                        is_send: self.conn.send,
                    };
                    let handle = sink.start(&event, task.parent);
                    sink.record(handle, state::PROXY_OP_IN_PROGRESS, None);
                    self.cur = Some(OpTrack { handle, task });
                    handle
                }
            };
            let pos = self.next;
            let last = pos + 1 == task.end;
            let handle = sink.start(
                &Event::ProxyStep {
                    step: (pos - task.first) as u32,
                },
                op,
            );
            self.steps.push_back(StepTrack {
                handle,
                op,
                last,
                net: (handle != 0).then(|| {
                    Box::new(NetStepRef {
                        sink: sink.clone(),
                        step: handle,
                    })
                }),
            });
            self.next += 1;
            if last {
                self.cur = None;
            }
            if self.conn.send {
                // The proxy sees a send's slot once the kernel filled it, and sockets need no
                // clear-to-send: both waits end as the step starts.
                sink.record(handle, state::PROXY_STEP_SEND_GPU_WAIT, None);
                sink.record(handle, state::PROXY_STEP_SEND_PEER_WAIT, None);
            }
            if pos < self.posted && !self.conn.send {
                sink.record(handle, state::PROXY_STEP_RECV_WAIT, None);
            }
            if let Some(bytes) = self.early.pop_front() {
                // Finished before a task covered it: its step ends at once.
                self.completed(pos, bytes);
            }
        }
    }
}

impl Drop for ConnEvents {
    fn drop(&mut self) {
        // What is still open stops with the connection.
        let Some(sink) = &self.sink else { return };
        for s in self.steps.drain(..) {
            sink.stop(s.handle);
            if s.last {
                sink.stop(s.op);
            }
        }
        if let Some(op) = self.cur.take() {
            sink.stop(op.handle);
        }
    }
}

/// NCCL's `ncclProfilerNetEvent*` callback kinds.
const NET_EVENT_START: c_int = 0;
const NET_EVENT_STOP: c_int = 1;
const NET_EVENT_UPDATE: c_int = 2;
const NET_EVENT_UPDATE_AND_STOP: c_int = 3;

/// A v10+ net plugin's profiler callback: starts, updates or stops a NetPlugin event under the
/// step `p_handle` names (a [`NetStepRef`] this proxy passed with the request; null: none).
///
/// # Safety
/// `e_handle` is valid for reads and writes; `p_handle` is null or a `NetStepRef` pointer this
/// proxy passed to `isend`/`irecv` for a request that is not done yet.
pub unsafe fn net_plugin_event(
    e_handle: *mut *mut c_void,
    kind: c_int,
    p_handle: *mut c_void,
    plugin_id: i64,
    ext: *mut c_void,
) {
    if e_handle.is_null() || p_handle.is_null() {
        return;
    }
    // SAFETY: the caller's contract: a live `NetStepRef` of a request in flight.
    let step = unsafe { &*p_handle.cast::<NetStepRef>() };
    match kind {
        NET_EVENT_START => {
            let event = Event::NetPlugin {
                id: plugin_id,
                data: ext as usize,
            };
            let h = step.sink.start(&event, step.step);
            // SAFETY: the caller's contract: `e_handle` is writable.
            unsafe { *e_handle = h as *mut c_void };
        }
        _ => {
            // SAFETY: the caller's contract: `e_handle` holds what the start wrote.
            let h = unsafe { *e_handle } as Handle;
            if h == 0 {
                return;
            }
            if kind == NET_EVENT_UPDATE || kind == NET_EVENT_UPDATE_AND_STOP {
                step.sink
                    .record(h, state::NET_PLUGIN_UPDATE, Some(ext as u64));
            }
            if kind == NET_EVENT_STOP || kind == NET_EVENT_UPDATE_AND_STOP {
                step.sink.stop(h);
            }
        }
    }
}

#[cfg(test)]
/// Logs every call; handles count from 1.
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) log: Mutex<Vec<String>>,
}

#[cfg(test)]
impl ProxyEventSink for Recorder {
    fn start(&self, event: &Event, parent: Handle) -> Handle {
        let mut log = lock(&self.log);
        let h = log.len() + 1;
        let what = match *event {
            Event::ProxyOp {
                channel,
                peer,
                n_steps,
                chunk_size,
                is_send,
            } => {
                format!("op ch{channel} peer{peer} steps{n_steps} chunk{chunk_size} send{is_send}")
            }
            Event::ProxyStep { step } => format!("step{step}"),
            Event::NetPlugin { id, data } => format!("net{id} data{data}"),
            _ => "other".into(),
        };
        log.push(format!("start#{h} {what} under#{parent}"));
        h
    }
    fn record(&self, handle: Handle, state: c_int, arg: Option<u64>) {
        lock(&self.log).push(format!("record#{handle} {state} {arg:?}"));
    }
    fn stop(&self, handle: Handle) {
        lock(&self.log).push(format!("stop#{handle}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEND: ConnKey = ConnKey {
        channel: 1,
        peer: 3,
        send: true,
        ll: false,
    };
    const RECV: ConnKey = ConnKey {
        send: false,
        ..SEND
    };

    fn task(conn: ConnKey, parent: Handle, slots: u64) -> ProxyTask {
        ProxyTask {
            conn,
            parent,
            slots,
            chunk_bytes: 512,
        }
    }

    fn setup(
        conn: ConnKey,
    ) -> (
        Arc<Recorder>,
        Arc<dyn ProxyEventSink>,
        Arc<ProxyEvents>,
        ConnEvents,
    ) {
        let rec = Arc::new(Recorder::default());
        let sink: Arc<dyn ProxyEventSink> = rec.clone();
        let shared = Arc::new(ProxyEvents::default());
        let ev = ConnEvents::new(conn, shared.clone());
        (rec, sink, shared, ev)
    }

    #[test]
    fn send_slots_raise_a_step_each_under_their_tasks_op() {
        let (rec, sink, shared, mut ev) = setup(SEND);
        assert!(!ev.active());
        // Two tasks; another connection's task is not this one's.
        shared.post(&sink, &[task(SEND, 100, 2), task(RECV, 300, 5)]);
        shared.post(&sink, &[task(SEND, 200, 1)]);
        assert!(ev.active());
        for pos in 0..3 {
            let ph = ev.before_post(pos);
            assert!(!ph.is_null(), "slot {pos} has a step for the net plugin");
            ev.posted(pos, Some(10 + pos));
            ev.completed(pos, 10 + pos);
        }
        let (g, w, s) = (
            state::PROXY_STEP_SEND_GPU_WAIT,
            state::PROXY_STEP_SEND_PEER_WAIT,
            state::PROXY_STEP_SEND_WAIT,
        );
        let p = state::PROXY_OP_IN_PROGRESS;
        assert_eq!(
            *lock(&rec.log),
            [
                "start#1 op ch1 peer3 steps2 chunk512 sendtrue under#100".to_string(),
                format!("record#1 {p} None"),
                "start#3 step0 under#1".into(),
                format!("record#3 {g} None"),
                format!("record#3 {w} None"),
                format!("record#3 {s} Some(10)"),
                "stop#3".into(),
                "start#8 step1 under#1".into(),
                format!("record#8 {g} None"),
                format!("record#8 {w} None"),
                format!("record#8 {s} Some(11)"),
                "stop#8".into(),
                "stop#1".into(),
                "start#14 op ch1 peer3 steps1 chunk512 sendtrue under#200".into(),
                format!("record#14 {p} None"),
                "start#16 step0 under#14".into(),
                format!("record#16 {g} None"),
                format!("record#16 {w} None"),
                format!("record#16 {s} Some(12)"),
                "stop#16".into(),
                "stop#14".into(),
            ]
        );
        // A slot no task covers raises nothing.
        assert!(ev.before_post(3).is_null());
        assert_eq!(lock(&rec.log).len(), 21);
    }

    #[test]
    fn receives_posted_and_landed_before_their_launch_are_raised_once_it_is_posted() {
        let (rec, sink, shared, mut ev) = setup(RECV);
        // The proxy pre-posts receives; the first lands before any launch told it anything.
        for pos in 0..3 {
            assert!(ev.before_post(pos).is_null());
            ev.posted(pos, None);
        }
        ev.completed(0, 100);
        assert!(lock(&rec.log).is_empty());
        shared.post(&sink, &[task(RECV, 7, 3)]);
        ev.before_post(3);
        ev.posted(3, None);
        ev.completed(1, 200);
        ev.completed(2, 300);
        let (w, g, p) = (
            state::PROXY_STEP_RECV_WAIT,
            state::PROXY_STEP_RECV_GPU_WAIT,
            state::PROXY_OP_IN_PROGRESS,
        );
        assert_eq!(
            *lock(&rec.log),
            [
                "start#1 op ch1 peer3 steps3 chunk512 sendfalse under#7".to_string(),
                format!("record#1 {p} None"),
                "start#3 step0 under#1".into(),
                format!("record#3 {w} None"),
                format!("record#3 {g} Some(100)"),
                "stop#3".into(),
                "start#7 step1 under#1".into(),
                format!("record#7 {w} None"),
                "start#9 step2 under#1".into(),
                format!("record#9 {w} None"),
                format!("record#7 {g} Some(200)"),
                "stop#7".into(),
                format!("record#9 {g} Some(300)"),
                "stop#9".into(),
                "stop#1".into(),
            ]
        );
    }

    #[test]
    fn a_captured_launch_turns_the_events_off() {
        let (rec, sink, shared, mut ev) = setup(SEND);
        shared.post(&sink, &[task(SEND, 1, 1)]);
        shared.disable();
        assert!(!ev.active());
        shared.post(&sink, &[task(SEND, 2, 1)]);
        assert!(!ev.active());
        assert!(ev.before_post(0).is_null());
        assert!(lock(&rec.log).is_empty());
    }

    #[test]
    fn the_net_plugin_callback_hangs_its_events_under_the_step() {
        let (rec, sink, shared, mut ev) = setup(SEND);
        shared.post(&sink, &[task(SEND, 5, 1)]);
        let ph = ev.before_post(0);
        let mut eh: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ph` is the live step reference of slot 0; `eh` is a local slot.
        unsafe {
            net_plugin_event(&mut eh, NET_EVENT_START, ph, 42, 0x99 as *mut c_void);
            net_plugin_event(
                &mut eh,
                NET_EVENT_UPDATE_AND_STOP,
                ph,
                42,
                0x77 as *mut c_void,
            );
            // No step: ignored.
            net_plugin_event(
                &mut eh,
                NET_EVENT_START,
                std::ptr::null_mut(),
                42,
                std::ptr::null_mut(),
            );
        }
        let log = lock(&rec.log);
        assert_eq!(log[5], "start#6 net42 data153 under#3");
        assert_eq!(
            log[6],
            format!("record#6 {} Some(119)", state::NET_PLUGIN_UPDATE)
        );
        assert_eq!(log[7], "stop#6");
        assert_eq!(log.len(), 8);
    }
}
