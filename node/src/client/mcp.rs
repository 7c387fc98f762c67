//! `termesh mcp`: the Model Context Protocol over stdio (the official
//! Rust SDK, `rmcp`), so an agent can run agents. It reaches a node as the
//! CLI does (`Target`); each tool is one connection and the requests of
//! PROTOCOL.md, so every tool works for a session on any node of the
//! cluster. A termesh error is a tool error (`isError`) whose text starts
//! with its code (`exited: session ... has exited`).

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::{schemars, tool, tool_handler, tool_router, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{json, Value};
use termesh_transport::{ClientMsg, CreateRequest, SendWhen, ServerMsg, SessionInfo};

use super::commands::{list, lookup};
use super::{Client, Target};

/// A tool's answer: JSON text, or the error's text (code first).
type Answer = Result<String, String>;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ListArgs {
    /// Only sessions in this state: `waiting`, `working` or `idle`.
    pub state: Option<String>,
    /// Ended sessions (exited, lost) too.
    #[serde(default)]
    pub all: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CreateArgs {
    /// The program and its arguments (default: the node's shell).
    pub command: Option<Vec<String>>,
    /// A unique name on its node.
    pub name: Option<String>,
    /// The working directory.
    pub cwd: Option<String>,
    /// The cluster node to run it on (default: the one connected to).
    pub node: Option<String>,
    /// Columns and rows of its terminal (default 80x24).
    pub cols: Option<u64>,
    pub rows: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SendArgs {
    /// Session: id, id prefix or name.
    pub session: String,
    /// The text to type (a paste when the program asked for bracketed paste).
    pub text: String,
    /// Press Enter after it (default true).
    pub submit: Option<bool>,
    /// `now` (default) or `waiting`: held until the session waits for an answer.
    pub when: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WaitArgs {
    /// Session: id, id prefix or name.
    pub session: String,
    /// States to wait for: `working`, `waiting`, `idle`, `exited` (an ended
    /// session always answers `exited`). Default: waiting and exited.
    pub until: Option<Vec<String>>,
    /// How long at most, in milliseconds (default 30000, at most 3600000).
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ReadArgs {
    /// Session: id, id prefix or name.
    pub session: String,
    /// Only what came after this seq (the `seq` an earlier read returned).
    pub since_seq: Option<u64>,
    /// At most this many bytes of output (default and most 1 MiB).
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct GrepArgs {
    /// A regex (Rust syntax; `(?i)` for any case) over each line of plain text.
    pub pattern: String,
    /// Only these sessions (ids, id prefixes or names).
    pub sessions: Option<Vec<String>>,
    /// Only sessions in this state now: waiting, working or idle.
    pub state: Option<String>,
    /// Lines of context before and after each hit (at most 10).
    pub context: Option<u32>,
    /// At most this many hits (default 100, at most 10000).
    pub max_hits: Option<u32>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SessionArgs {
    /// Session: id, id prefix or name.
    pub session: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct KillArgs {
    /// Session: id, id prefix or name.
    pub session: String,
    /// TERM (default), KILL, HUP or INT.
    pub signal: Option<String>,
}

#[derive(Clone)]
pub struct Mcp {
    target: Target,
    tool_router: ToolRouter<Self>,
}

/// A session as the tools show it.
fn brief(s: &SessionInfo) -> Value {
    json!({
        "id": s.id,
        "name": s.name,
        "node": s.node,
        "status": s.status.as_str(),
        "exit_code": s.exit_code,
        "state": s.state.map(|st| st.as_str()),
        "waiting_for": s.waiting_for,
        "command": s.command,
        "seq": s.last_seq,
    })
}

/// A reply of the wrong kind, as a tool error.
fn unexpected(reply: &ServerMsg) -> String {
    let debug = format!("{reply:?}");
    let kind = debug.split([' ', '{', '(']).next().unwrap_or_default();
    format!("internal: unexpected answer `{kind}`")
}

/// An error as a tool error's text: the termesh code first, when the node
/// answered one.
fn failed(e: anyhow::Error) -> String {
    format!("{e:#}")
}

#[tool_router]
impl Mcp {
    pub fn new(target: Target) -> Mcp {
        Mcp {
            target,
            tool_router: Self::tool_router(),
        }
    }

    async fn connect(&self) -> Result<Client, String> {
        Client::connect(&self.target).await.map_err(failed)
    }

    /// `msg` for the session named `wanted` (id, prefix or name).
    async fn ask(
        &self,
        wanted: &str,
        msg: impl FnOnce(u64, String) -> ClientMsg,
    ) -> Result<ServerMsg, String> {
        let mut client = self.connect().await?;
        let session = lookup(&mut client, wanted).await.map_err(failed)?.id;
        let reply = client.request(|id| msg(id, session)).await.map_err(failed);
        client.close().await;
        reply
    }

    #[tool(
        description = "The cluster's sessions with their node, status and state (waiting: it needs a person; working; idle), the longest waiting first. JSON array of {id, name, node, status, exit_code, state, waiting_for, command, seq}."
    )]
    async fn list_sessions(&self, Parameters(args): Parameters<ListArgs>) -> Answer {
        let mut client = self.connect().await?;
        let mut sessions = list(&mut client).await.map_err(failed)?;
        client.close().await;
        sessions.retain(|s| args.all || !s.status.has_ended());
        if let Some(state) = &args.state {
            sessions.retain(|s| s.state.map(|st| st.as_str()) == Some(state.as_str()));
        }
        sessions.sort_by_key(|s| {
            let waiting = s.state == Some(termesh_transport::AgentState::Waiting);
            (!waiting, s.state_since.unwrap_or(u64::MAX))
        });
        Ok(Value::from(sessions.iter().map(brief).collect::<Vec<_>>()).to_string())
    }

    #[tool(
        description = "Start a program in a new session (a real terminal). Answers the session as JSON: {id, name, node, status, state, ...}."
    )]
    async fn create_session(&self, Parameters(args): Parameters<CreateArgs>) -> Answer {
        let mut client = self.connect().await?;
        let req = CreateRequest {
            command: args.command,
            name: args.name,
            cwd: args.cwd,
            node: args.node,
            cols: args.cols,
            rows: args.rows,
            ..Default::default()
        };
        let reply = client
            .request(|id| ClientMsg::Create { id, req })
            .await
            .map_err(failed);
        client.close().await;
        match reply? {
            ServerMsg::Created { session, .. } => Ok(brief(&session).to_string()),
            other => Err(unexpected(&other)),
        }
    }

    #[tool(
        description = "Type text into a session as its program expects typed text, then Enter (unless submit is false). With when=waiting it is held until the session waits for an answer. Answers `ok` once written."
    )]
    async fn send(&self, Parameters(args): Parameters<SendArgs>) -> Answer {
        let when = match args.when.as_deref() {
            None | Some("now") => SendWhen::Now,
            Some("waiting") => SendWhen::Waiting,
            Some(other) => {
                return Err(format!(
                    "bad_request: `when` is `now` or `waiting`, not `{other}`"
                ))
            }
        };
        self.ask(&args.session, |id, session| ClientMsg::Send {
            id,
            session,
            text: args.text,
            submit: args.submit,
            when: Some(when),
        })
        .await
        .map(|_| "ok".into())
    }

    #[tool(
        description = "Wait until a session is in one of the states (working, waiting, idle, exited). Answers {state, seq} (seq: where its output stood); a tool error `timeout: ...` past timeout_ms."
    )]
    async fn wait(&self, Parameters(args): Parameters<WaitArgs>) -> Answer {
        let until = args
            .until
            .unwrap_or_else(|| vec!["waiting".into(), "exited".into()]);
        match self
            .ask(&args.session, |id, session| ClientMsg::Wait {
                id,
                session,
                until,
                timeout_ms: args.timeout_ms,
            })
            .await?
        {
            ServerMsg::State { state, seq, .. } => {
                Ok(json!({ "state": state, "seq": seq }).to_string())
            }
            other => Err(unexpected(&other)),
        }
    }

    #[tool(
        description = "What a session printed after since_seq, as plain text (escape sequences removed, redrawn lines as they ended). Answers {seq, text}: pass seq as the next since_seq."
    )]
    async fn read(&self, Parameters(args): Parameters<ReadArgs>) -> Answer {
        match self
            .ask(&args.session, |id, session| ClientMsg::Read {
                id,
                session,
                since_seq: args.since_seq,
                max_bytes: args.max_bytes,
            })
            .await?
        {
            ServerMsg::Text { seq, text, .. } => {
                Ok(json!({ "seq": seq, "text": text }).to_string())
            }
            other => Err(unexpected(&other)),
        }
    }

    #[tool(
        description = "Search what every session in the cluster printed (all of its stored output, as plain text) for a regex. Answers {hits: [{session, node, seq, line, before, after}], truncated, errors}; read with since_seq = seq - 1 shows the output from a hit on."
    )]
    async fn grep(&self, Parameters(args): Parameters<GrepArgs>) -> Answer {
        let mut client = self.connect().await?;
        let sessions = match args.sessions {
            None => None,
            Some(wanted) => {
                let mut ids = Vec::new();
                for w in wanted {
                    ids.push(lookup(&mut client, &w).await.map_err(failed)?.id);
                }
                Some(ids)
            }
        };
        let id = client.next_id();
        let msg = ClientMsg::Grep {
            id,
            pattern: args.pattern,
            sessions,
            since_ms: None,
            state: args.state,
            context: args.context,
            max_hits: Some(args.max_hits.unwrap_or(100)),
            timeout_ms: None,
            node: None,
        };
        client.send(&msg).await.map_err(failed)?;
        let mut hits = Vec::new();
        loop {
            match client.next_for(id).await.map_err(failed)? {
                ServerMsg::GrepHits { hits: more, .. } => hits.extend(more),
                ServerMsg::GrepDone {
                    truncated, errors, ..
                } => {
                    client.close().await;
                    return Ok(
                        json!({ "hits": hits, "truncated": truncated, "errors": errors })
                            .to_string(),
                    );
                }
                ServerMsg::Error { code, message, .. } => {
                    return Err(format!("{}: {message}", code.as_str()))
                }
                _ => {}
            }
        }
    }

    #[tool(description = "The session's screen now, as text: one line per row.")]
    async fn screen(&self, Parameters(args): Parameters<SessionArgs>) -> Answer {
        match self
            .ask(&args.session, |id, session| ClientMsg::Screen {
                id,
                session,
                scrollback: None,
            })
            .await?
        {
            ServerMsg::Snapshot {
                cols, rows, data, ..
            } => Ok(crate::text::render_text(&data, cols, rows).join("\n")),
            other => Err(unexpected(&other)),
        }
    }

    #[tool(
        description = "Signal a session's program (TERM by default, then KILL after the node's grace period). Answers `ok`."
    )]
    async fn kill_session(&self, Parameters(args): Parameters<KillArgs>) -> Answer {
        let signal = args.signal.unwrap_or_else(|| "TERM".into());
        self.ask(&args.session, |id, session| ClientMsg::Kill {
            id,
            session,
            signal: Some(signal),
        })
        .await
        .map(|_| "ok".into())
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Mcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "termesh runs programs (coding agents, shells, builds) in real terminals on a cluster. \
             list_sessions shows which wait for a person; wait until a session waits, read what it \
             printed, send an answer.",
        )
    }
}

/// Serves MCP on stdin/stdout until the client closes them.
pub async fn serve(target: Target) -> anyhow::Result<()> {
    let service = Mcp::new(target)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("MCP: {e}"))?;
    service
        .waiting()
        .await
        .map_err(|e| anyhow::anyhow!("MCP: {e}"))?;
    Ok(())
}
