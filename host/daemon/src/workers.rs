//! Request threads kept for the next connection.
//!
//! A connection still has a thread of its own for as long as it lasts, so a
//! peer that sends slowly holds its own thread and never another peer's.
//! What changes is the end: a thread whose connection is done waits a while
//! for the next one instead of exiting. A new thread costs a clone, a stack
//! mapping, the handle on its own network namespace that `in_netns` opens
//! once per thread, a malloc arena's first touch, and at exit the stack's
//! pages given back, which on a daemon that ran on several CPUs is a TLB
//! shootdown on each of them (host/bench/results/findings.md).
//!
//! A job may say it is as good as done ([`Ready::now`]) as its answer goes
//! out: the peer, once answered, may connect again at once, and counting
//! the thread as waiting from then on gives that next connection to it
//! rather than to a new thread. Counted only after the write, a new thread
//! was started whenever the write's wakeup of the peer preempted the writer
//! before it counted itself, and stayed. A job that finds it has more to
//! wait for after all (a reader too slow to take the whole answer at once,
//! an undo) takes the count back ([`Ready::revoke`]): if a connection was
//! already queued for it, a new thread takes that one, so a peer still
//! never holds up another's connection.
//!
//! Nothing of a request outlives it on its thread: the daemon never changes
//! a thread's credentials, `in_netns` always brings the thread back to its
//! own namespace (or aborts the process), and the log capture is restored
//! when the call it wraps returns.

use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce(&Ready) + Send + 'static>;

pub struct Workers {
    state: Mutex<State>,
    more: Condvar,
    /// Threads that may wait at once; one finishing beyond that exits.
    keep_idle: usize,
    /// How long a thread waits for the next connection before exiting.
    idle_for: Duration,
    stack_size: usize,
    name: &'static str,
}

#[derive(Default)]
struct State {
    /// Waiting threads that no queued job is meant for: the number of
    /// waiting threads less the queued jobs.
    idle: usize,
    queue: VecDeque<Job>,
    /// Threads started so far.
    started: u64,
}

impl Workers {
    pub fn new(
        name: &'static str,
        stack_size: usize,
        keep_idle: usize,
        idle_for: Duration,
    ) -> Arc<Self> {
        Arc::new(Workers {
            state: Mutex::new(State::default()),
            more: Condvar::new(),
            keep_idle,
            idle_for,
            stack_size,
            name,
        })
    }

    /// Run `job` on a waiting thread, or on a new one if none waits.
    pub fn run(self: &Arc<Self>, job: impl FnOnce(&Ready) + Send + 'static) -> io::Result<()> {
        let job: Job = Box::new(job);
        {
            let mut s = self
                .state
                .lock()
                .map_err(|_| io::Error::other("the request threads' state is poisoned"))?;
            if s.idle > 0 {
                s.idle -= 1;
                s.queue.push_back(job);
                drop(s);
                self.more.notify_one();
                return Ok(());
            }
            s.started += 1;
        }
        self.spawn(Some(job))
    }

    /// Start a thread that runs `first`, then serves the queue. Without a
    /// first job it starts out counted as waiting: it takes the place of a
    /// thread that took its count back ([`Ready::revoke`]).
    fn spawn(self: &Arc<Self>, first: Option<Job>) -> io::Result<()> {
        let me = self.clone();
        std::thread::Builder::new()
            .name(self.name.into())
            .stack_size(self.stack_size)
            .spawn(move || {
                let counted = first.is_none_or(|job| me.run_job(job));
                me.serve_more(counted);
            })
            .map(|_| ())
    }

    /// Run one job; whether it counted its thread as waiting.
    fn run_job(self: &Arc<Self>, job: Job) -> bool {
        let ready = Ready {
            workers: self,
            counted: Cell::new(false),
        };
        job(&ready);
        ready.counted.get()
    }

    /// Threads started so far.
    #[cfg(test)]
    fn started(&self) -> u64 {
        self.state.lock().map(|s| s.started).unwrap_or(0)
    }

    /// After a job: take the next until none comes within `idle_for`.
    /// `counted`: the job already counted this thread as waiting.
    fn serve_more(self: &Arc<Self>, mut counted: bool) {
        while let Some(job) = self.next_job(counted) {
            counted = self.run_job(job);
        }
    }

    /// Count this thread as waiting, if no more than `keep_idle` are.
    fn count_idle(&self, s: &mut State) -> bool {
        let room = s.idle < self.keep_idle;
        if room {
            s.idle += 1;
        }
        room
    }

    fn next_job(&self, counted: bool) -> Option<Job> {
        let mut s = self.state.lock().ok()?;
        if !counted && !self.count_idle(&mut s) {
            return None;
        }
        let deadline = Instant::now() + self.idle_for;
        loop {
            // Any waiting thread may take any queued job: the count stays
            // right, since the job's sender already took one off `idle`.
            if let Some(job) = s.queue.pop_front() {
                return Some(job);
            }
            let now = Instant::now();
            if now >= deadline {
                s.idle -= 1;
                return None;
            }
            s = self.more.wait_timeout(s, deadline - now).ok()?.0;
        }
    }
}

/// Given to a job: lets it count its thread as waiting before it returns.
pub struct Ready<'a> {
    workers: &'a Arc<Workers>,
    counted: Cell<bool>,
}

impl Ready<'_> {
    /// The job is as good as done: what is left of it is bounded local work
    /// (never a chain, never a wait on a peer, unless taken back first with
    /// [`Ready::revoke`]), so the next connection may be queued for this
    /// thread now.
    pub fn now(&self) {
        if self.counted.get() {
            return;
        }
        if let Ok(mut s) = self.workers.state.lock() {
            self.counted.set(self.workers.count_idle(&mut s));
        }
    }

    /// Take back [`Ready::now`]: the job has more to wait for. A waiting
    /// place not yet given to a queued connection is simply dropped; if it
    /// was given, a new thread takes this one's place and that connection.
    pub fn revoke(&self) {
        if !self.counted.replace(false) {
            return;
        }
        let Ok(mut s) = self.workers.state.lock() else {
            return;
        };
        if s.idle > 0 {
            s.idle -= 1;
            return;
        }
        s.started += 1;
        drop(s);
        if self.workers.spawn(None).is_err() {
            // No thread to give the queued connection to: it waits for
            // this one, as it would for a thread at the bound.
            self.counted.set(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn thread_id_of(w: &Arc<Workers>) -> std::thread::ThreadId {
        let (tx, rx) = mpsc::channel();
        w.run(move |_| {
            let _ = tx.send(std::thread::current().id());
        })
        .unwrap();
        rx.recv_timeout(Duration::from_secs(5)).unwrap()
    }

    /// Wait (5 s at most) until the count of idle threads passes `done`.
    fn until(w: &Workers, done: impl Fn(usize) -> bool, what: &str) {
        let end = Instant::now() + Duration::from_secs(5);
        while !done(w.state.lock().unwrap().idle) {
            assert!(Instant::now() < end, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Wait until the threads that ran the last jobs wait for the next.
    fn until_idle(w: &Workers, n: usize) {
        until(w, |idle| idle >= n, "no thread came back to wait");
    }

    #[test]
    fn a_finished_thread_takes_the_next_connection() {
        let w = Workers::new("t", 1 << 20, 4, Duration::from_secs(30));
        let first = thread_id_of(&w);
        until_idle(&w, 1);
        let second = thread_id_of(&w);
        assert_eq!(first, second);
        assert_eq!(w.started(), 1);
    }

    #[test]
    fn a_job_done_but_for_its_cleanup_takes_the_next_connection() {
        // The first job says it is ready, then stays on its thread until
        // the next connection was handed out: that one waits for it rather
        // than starting a thread.
        let w = Workers::new("t", 1 << 20, 4, Duration::from_secs(30));
        let (said_tx, said_rx) = mpsc::channel::<std::thread::ThreadId>();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        w.run(move |ready| {
            ready.now();
            // Twice counts once.
            ready.now();
            said_tx.send(std::thread::current().id()).unwrap();
            go_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        })
        .unwrap();
        let first = said_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let (tx, rx) = mpsc::channel();
        w.run(move |_| tx.send(std::thread::current().id()).unwrap())
            .unwrap();
        assert_eq!(w.started(), 1, "a thread was started for a queued job");
        // Not run until the first job has returned.
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        go_tx.send(()).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), first);
        // Back to one waiting thread: the early count was not taken twice.
        until_idle(&w, 1);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(w.state.lock().unwrap().idle, 1);
    }

    #[test]
    fn a_revoked_ready_hands_its_queued_connection_to_a_new_thread() {
        // The first job says it is ready, a connection is queued for it,
        // then the job finds it must wait (a slow reader): the queued one
        // must run meanwhile, on a thread of its own.
        let w = Workers::new("t", 1 << 20, 4, Duration::from_secs(30));
        let (queued_tx, queued_rx) = mpsc::channel::<()>();
        let (said_tx, said_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<&str>();
        let first_done = done_tx.clone();
        w.run(move |ready| {
            ready.now();
            said_tx.send(()).unwrap();
            queued_rx.recv_timeout(Duration::from_secs(5)).unwrap();
            ready.revoke();
            // Held here while the queued job runs elsewhere.
            std::thread::sleep(Duration::from_millis(200));
            let _ = first_done.send("first");
        })
        .unwrap();
        said_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        w.run(move |_| done_tx.send("queued").unwrap()).unwrap();
        assert_eq!(w.started(), 1);
        queued_tx.send(()).unwrap();
        assert_eq!(
            done_rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            "queued",
            "the queued connection waited for the revoked thread"
        );
        assert_eq!(w.started(), 2);
        assert_eq!(
            done_rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            "first"
        );
        // Both end up waiting: neither count was lost or taken twice.
        until_idle(&w, 2);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(w.state.lock().unwrap().idle, 2);
    }

    #[test]
    fn a_revoked_ready_with_nothing_queued_starts_nothing() {
        let w = Workers::new("t", 1 << 20, 4, Duration::from_secs(30));
        let (tx, rx) = mpsc::channel::<()>();
        w.run(move |ready| {
            ready.now();
            ready.revoke();
            ready.revoke();
            tx.send(()).unwrap();
        })
        .unwrap();
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        until_idle(&w, 1);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(w.state.lock().unwrap().idle, 1);
        assert_eq!(w.started(), 1);
    }

    #[test]
    fn ready_beyond_the_bound_keeps_no_thread() {
        // With no room to wait, saying ready changes nothing: the next job
        // gets a thread of its own, and the finished one exits.
        let w = Workers::new("t", 1 << 20, 0, Duration::from_secs(30));
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (said_tx, said_rx) = mpsc::channel::<()>();
        w.run(move |ready| {
            ready.now();
            said_tx.send(()).unwrap();
            let _ = go_rx.recv_timeout(Duration::from_secs(5));
        })
        .unwrap();
        said_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        thread_id_of(&w);
        assert_eq!(w.started(), 2);
        go_tx.send(()).unwrap();
        assert_eq!(w.state.lock().unwrap().idle, 0);
    }

    #[test]
    fn connections_at_once_each_get_a_thread() {
        // A slow peer must not hold up another: two jobs that each wait for
        // the other can only finish on two threads.
        let w = Workers::new("t", 1 << 20, 4, Duration::from_secs(30));
        let (a_tx, a_rx) = mpsc::channel::<()>();
        let (b_tx, b_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let d = done_tx.clone();
        w.run(move |_| {
            a_tx.send(()).unwrap();
            b_rx.recv_timeout(Duration::from_secs(5)).unwrap();
            d.send(()).unwrap();
        })
        .unwrap();
        w.run(move |_| {
            a_rx.recv_timeout(Duration::from_secs(5)).unwrap();
            b_tx.send(()).unwrap();
            done_tx.send(()).unwrap();
        })
        .unwrap();
        for _ in 0..2 {
            done_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        assert_eq!(w.started(), 2);
    }

    #[test]
    fn idle_threads_exit_after_their_wait_and_beyond_the_bound() {
        let w = Workers::new("t", 1 << 20, 1, Duration::from_millis(50));
        let (tx, rx) = mpsc::channel::<()>();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let go_rx = Arc::new(Mutex::new(go_rx));
        for _ in 0..3 {
            let (tx, go) = (tx.clone(), go_rx.clone());
            w.run(move |_| {
                let _ = go.lock().unwrap().recv_timeout(Duration::from_secs(5));
                tx.send(()).unwrap();
            })
            .unwrap();
        }
        assert_eq!(w.started(), 3);
        for _ in 0..3 {
            go_tx.send(()).unwrap();
        }
        for _ in 0..3 {
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        // Only one of the three stays to wait, and only for a while.
        until_idle(&w, 1);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(w.state.lock().unwrap().idle, 1);
        until(&w, |idle| idle == 0, "the idle thread never left");
        // Then the next connection starts a thread again.
        thread_id_of(&w);
        assert_eq!(w.started(), 4);
    }
}
