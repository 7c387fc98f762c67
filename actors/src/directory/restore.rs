//! A node's start and stop, the registry's side: sessions found in the
//! store go back in the directory, running again when the PTY keeper held
//! their programs across the restart (`lost` otherwise); the shutdown
//! leaves kept programs running for the next start and ends the node's
//! own children.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use termesh_transport::SessionStatus;

use crate::directory::homes::Home;
use crate::directory::registry::{Registry, SessionHandle, WatchEvent};
use crate::keeper::Held;
use crate::metrics::Metrics;
use crate::session::pty::{self, Pty};
use crate::session::{Leave, Meta, SessionActor, SessionShared};
use crate::store::Restored;

/// How long a stopping node waits for its sessions to hand what they read
/// to the store.
const LEAVE_WAIT: Duration = Duration::from_secs(10);

/// Sessions found in the store at start, and the programs the keeper held.
#[derive(Message)]
#[rtype(result = "RestoreCount")]
pub struct Restore {
    pub sessions: Vec<Restored>,
    pub kept: Vec<Held>,
}

/// What a restore found.
#[derive(Debug, Clone, Copy, Default, MessageResponse)]
pub struct RestoreCount {
    pub sessions: usize,
    /// Taken up from the keeper, running.
    pub running: usize,
    /// Were running, and their programs are gone.
    pub lost: usize,
}

impl Handler<Restore> for Registry {
    type Result = RestoreCount;

    fn handle(&mut self, msg: Restore, ctx: &mut Context<Self>) -> RestoreCount {
        let mut kept: HashMap<String, Held> =
            msg.kept.into_iter().map(|h| (h.id.clone(), h)).collect();
        let mut count = RestoreCount {
            sessions: msg.sessions.len(),
            ..Default::default()
        };
        for stored in msg.sessions {
            let held = kept.remove(&stored.info.id);
            match self.restore(stored, held, ctx) {
                Some(SessionStatus::Running) => count.running += 1,
                Some(SessionStatus::Lost) => count.lost += 1,
                _ => {}
            }
        }
        for (id, held) in kept {
            // Started, but its create never reached the store (the node
            // died in between): nobody was told of it, so it goes.
            tracing::warn!(session = %id, pid = held.pid, "the PTY keeper held a program the store does not know: ended");
            if let Some(keeper) = &self.config.keeper {
                keeper.release(&id);
            }
        }
        count
    }
}

impl Registry {
    /// The program the keeper held for `id`, taken up when the session
    /// was running and is not here already; released otherwise.
    fn take_up(
        &self,
        id: &Arc<str>,
        home: &Home,
        held: Option<Held>,
        was_running: bool,
    ) -> Option<Pty> {
        let (held, keeper) = (held?, self.config.keeper.as_ref()?);
        if !was_running || self.dir.get(id).is_some() {
            keeper.release(&held.id);
            return None;
        }
        match pty::adopt(
            (&self.config.settings.pty_io, &home.runtime),
            keeper,
            &held.id,
            held.pid,
            held.master,
        ) {
            Ok(pty) => Some(pty),
            Err(e) => {
                tracing::error!(session = %id, "the program the PTY keeper held cannot be taken up: {e}");
                None
            }
        }
    }

    /// A session that was running before the restart: taken up (`pty`) or
    /// lost, stored as an event and logged.
    fn tell_restart(&mut self, id: &Arc<str>, pty: Option<&Pty>) {
        let event = match pty {
            Some(pty) => {
                tracing::info!(session = %id, pid = pty.pid, "session taken up again from the PTY keeper");
                serde_json::json!({
                    "kind": "node_restarted",
                    "status": "running",
                    "pid": pty.pid,
                    "message": "the node restarted; the program ran on under the PTY keeper",
                })
            }
            None => {
                tracing::warn!(session = %id, "session lost: its program did not outlive the node");
                serde_json::json!({
                    "kind": "node_restarted",
                    "status": "lost",
                    "message": "the node restarted; the session's program died with it",
                })
            }
        };
        self.record_event(id, event);
    }

    /// Puts a session found in the store back in the directory: running
    /// again if the keeper held its program, `lost` if it was running and
    /// its program is gone. Answers the status it was running with.
    fn restore(
        &mut self,
        stored: Restored,
        held: Option<Held>,
        ctx: &mut Context<Self>,
    ) -> Option<SessionStatus> {
        let info = &stored.info;
        let id: Arc<str> = info.id.as_str().into();
        let was_running = info.status == SessionStatus::Running;
        let home = self.homes.next();
        let mut pty = self.take_up(&id, &home, held, was_running);
        if self.dir.get(&id).is_some() {
            return None;
        }
        let status = match (&pty, info.status) {
            (Some(_), _) => SessionStatus::Running,
            (None, SessionStatus::Exited) => SessionStatus::Exited,
            (None, _) => SessionStatus::Lost,
        };
        if was_running {
            self.tell_restart(&id, pty.as_ref());
        }
        let shared = Arc::new(SessionShared {
            id: id.clone(),
            node: self.config.node.clone(),
            command: info.command.clone(),
            cwd: info.cwd.clone(),
            resume_command: stored.resume_command.clone().or_else(|| {
                let agent = self.config.settings.agents.of(&info.command);
                agent.and_then(|a| a.resume)
            }),
            created_at: info.created_at,
            last_seq: stored.last_seq.into(),
            last_output_ms: Some(stored.last_output_ms)
                .filter(|ms| *ms > 0)
                .unwrap_or(info.created_at)
                .into(),
            viewers: 0.into(),
            at_prompt: false.into(),
            bracketed_paste: false.into(),
            typed: Default::default(),
            exited: pty.is_none().into(),
            meta: std::sync::Mutex::new(Meta {
                name: info.name.clone(),
                tags: info.tags.clone(),
                cols: info.cols,
                rows: info.rows,
                status,
                exit_code: info.exit_code.filter(|_| pty.is_none()),
                phase: info.phase.clone(),
                agent: pty
                    .is_some()
                    .then(|| crate::session::agent::starting(crate::clock::now_ms())),
            }),
        });
        // Input goes to the program's writer; nowhere when it is gone.
        if let Some(p) = pty.as_mut() {
            p.input.share_typed(&shared.typed);
        }
        let input = pty
            .as_ref()
            .map_or_else(crate::session::pty::InputTx::closed, |p: &Pty| {
                p.input.clone()
            });
        let (settings, metrics) = (self.config.settings.clone(), self.metrics.clone());
        let changed = ctx.address().recipient();
        let session_shared = shared.clone();
        let addr = SessionActor::start_in_arbiter(&home.arbiter, move |_| {
            SessionActor::restored(session_shared, stored, pty, settings, metrics, changed)
        });
        self.dir.insert(SessionHandle {
            id,
            addr,
            input,
            shared: shared.clone(),
            home,
        });
        Metrics::gauge(&self.metrics.sessions, 1);
        let info = self.persist(&shared);
        self.tell_watchers(WatchEvent::Changed(info));
        Some(status).filter(|_| was_running)
    }
}

/// Node shutdown: every session closes, programs the keeper holds run on
/// (their sessions stop reading them), the node's own children are killed;
/// answers (with how many) once every session has closed, so all the
/// output they read has been handed to the store before the store's flush
/// is asked for.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct Shutdown;

impl Handler<Shutdown> for Registry {
    type Result = ResponseFuture<usize>;

    fn handle(&mut self, _: Shutdown, _: &mut Context<Self>) -> Self::Result {
        let handles = self.dir.drain();
        Metrics::gauge(&self.metrics.sessions, -(handles.len() as i64));
        let n = handles.len();
        let leaving: Vec<_> = handles
            .iter()
            .map(|h| {
                let (tx, rx) = tokio::sync::oneshot::channel();
                h.addr.do_send(Leave(tx));
                rx
            })
            .collect();
        Box::pin(async move {
            let all = futures_util::future::join_all(leaving);
            if tokio::time::timeout(LEAVE_WAIT, all).await.is_err() {
                tracing::error!(
                    "sessions did not hand their output to the store within {LEAVE_WAIT:?}; stopping anyway"
                );
            }
            n
        })
    }
}
