//! Revive, the registry's side: an exited or lost session's command runs
//! again, in its cwd, with the same id (PROTOCOL.md, `revive`). The env a
//! create request gave is not kept (it may hold secrets): the new run gets
//! the node's `TERMESH_*` variables only. Seqs continue above the last.

use std::sync::Arc;

use actix::prelude::*;
use termesh_transport::{ErrorCode, SessionInfo};

use crate::directory::registry::{spawn_program, Registry, SessionHandle, WatchEvent};
use crate::error::ApiError;
use crate::session::pty::SpawnSpec;
use crate::session::{Relaunch, Released};

/// How long a revive waits for the last run's program to be released.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

#[derive(Message)]
#[rtype(result = "Result<SessionInfo, ApiError>")]
pub struct Revive {
    pub id: String,
}

impl Handler<Revive> for Registry {
    type Result = ResponseActFuture<Self, Result<SessionInfo, ApiError>>;

    fn handle(&mut self, msg: Revive, _: &mut Context<Self>) -> Self::Result {
        let ready = self.prepare_revive(&msg.id);
        let (handle, spec) = match ready {
            Ok(ready) => ready,
            Err(e) => return Box::pin(actix::fut::ready(Err(e))),
        };
        let id = handle.id.clone();
        let command = spec.command.clone();
        self.starting.insert(id.clone(), None);
        let thread_id = id.clone();
        let keeper = self.config.keeper.clone();
        let io = self.config.settings.pty_io.clone();
        // The new run's PTY tasks run on the session's thread, as the last's.
        let home = handle.home.runtime.clone();
        let work = async move {
            // The last run's program is released first (its end made
            // durable), or the keeper refuses a second program of this id.
            if let Ok(Some(mut released)) = handle.addr.send(Released).await {
                let wait = released.wait_for(|done| *done);
                if tokio::time::timeout(RELEASE_WAIT, wait).await.is_err() {
                    tracing::warn!(session = %handle.id, "revive: the last run's program was not released in {RELEASE_WAIT:?}");
                }
            }
            let pty = actix_rt::task::spawn_blocking(move || {
                // The release goes to the keeper from the last run's I/O
                // task: until it lands, the keeper still holds that run.
                let deadline = std::time::Instant::now() + RELEASE_WAIT;
                loop {
                    match spawn_program(&thread_id, &spec, (&io, &home), keeper.as_ref()) {
                        Err(e)
                            if e.message.contains("already holds a program")
                                && std::time::Instant::now() < deadline =>
                        {
                            std::thread::sleep(std::time::Duration::from_millis(10));
                        }
                        done => break done,
                    }
                }
            })
            .await
            .map_err(|e| {
                ApiError::new(ErrorCode::Internal, format!("session start failed: {e}"))
            })??;
            let mut pty = pty;
            pty.input.share_typed(&handle.shared.typed);
            let input = pty.input.clone();
            handle
                .addr
                .send(Relaunch { pty, command })
                .await
                .map_err(|_| ApiError::not_found(&handle.id))?
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "session `{}` has not ended: only an exited or lost session can be revived",
                        handle.id
                    ))
                })?;
            Ok(SessionHandle { input, ..handle })
        };
        Box::pin(work.into_actor(self).map(move |done, act, _| {
            act.starting.remove(&id);
            let handle = done?;
            // Still ours (not removed while it started): input goes to the
            // new run from now on.
            if act.dir.get(&handle.id).is_none() {
                return Err(ApiError::not_found(&handle.id));
            }
            let info = act.persist(&handle.shared);
            act.dir.insert(handle);
            act.tell_watchers(WatchEvent::Changed(info.clone()));
            Ok(info)
        }))
    }
}

impl Registry {
    /// The session to revive and how to start its program again.
    fn prepare_revive(&self, id: &str) -> Result<(SessionHandle, SpawnSpec), ApiError> {
        let handle = self.dir.get(id).ok_or_else(|| ApiError::not_found(id))?;
        if !handle.shared.is_exited() {
            return Err(ApiError::bad_request(format!(
                "session `{id}` is running: only an exited or lost session can be revived"
            )));
        }
        if self.starting.contains_key(id) {
            return Err(ApiError::bad_request(format!(
                "session `{id}` is being revived already"
            )));
        }
        let info = handle.shared.info();
        // An agent continues its conversation (`resume_command`).
        let command = handle.shared.resume_command.clone();
        let spec = SpawnSpec {
            command: command.unwrap_or_else(|| info.command.clone()),
            cwd: info.cwd.as_ref().map(Into::into),
            env: self.session_env(Arc::clone(&handle.id)),
            cols: info.cols,
            rows: info.rows,
        };
        Ok((handle, spec))
    }
}
