//! The `termesh` command: run a node, check a config, make a token, and the
//! protocol clients (`ls`, `new`, `kill`, `rm`, `logs`, `screen`, `attach`).

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use termesh_config::Config;
use termesh_node::client::attach::{attach, AttachOptions, Ended};
use termesh_node::client::{commands, Target};
use termesh_node::server;
use termesh_transport::CreateRequest;

#[derive(Parser)]
#[command(
    name = "termesh",
    version,
    about = "Terminal sessions that survive dropped links"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// How clients find the node.
#[derive(clap::Args, Clone)]
struct ClientArgs {
    /// Node URL.
    #[arg(long, env = "TERMESH_URL", global = true)]
    url: Option<String>,
    /// Access token (default: the local node's generated admin token).
    #[arg(long, env = "TERMESH_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
    /// Data dir holding admin.token (default: the node's default data dir).
    #[arg(long, env = "TERMESH_DATA_DIR", global = true)]
    data_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node (single-node defaults without a config file).
    Node {
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// HTTP listen address, e.g. 127.0.0.1:7420.
        #[arg(long)]
        listen: Option<String>,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Node name.
        #[arg(long)]
        name: Option<String>,
    },
    /// Config file tools.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Make a new access token and print the config lines that grant it.
    Token {
        #[arg(long, default_value = "operator", value_parser = ["viewer", "operator", "admin"])]
        role: String,
        #[arg(long)]
        name: Option<String>,
    },
    /// List sessions.
    Ls {
        #[command(flatten)]
        client: ClientArgs,
        #[arg(long)]
        json: bool,
    },
    /// Start a session and print its id.
    New {
        #[command(flatten)]
        client: ClientArgs,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        cwd: Option<String>,
        #[arg(long)]
        cols: Option<u64>,
        #[arg(long)]
        rows: Option<u64>,
        /// Attach right away.
        #[arg(long, short)]
        attach: bool,
        /// The program and its arguments (default: the node's shell).
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Signal a session's processes (TERM, then KILL after a grace time).
    Kill {
        #[command(flatten)]
        client: ClientArgs,
        session: String,
        #[arg(long, short, value_parser = ["TERM", "KILL", "HUP", "INT"])]
        signal: Option<String>,
    },
    /// Remove a session (killing it first if it runs).
    Rm {
        #[command(flatten)]
        client: ClientArgs,
        session: String,
    },
    /// Print a session's recent raw output, or its rendered history.
    Logs {
        #[command(flatten)]
        client: ClientArgs,
        session: String,
        /// Bytes of raw output.
        #[arg(long, default_value_t = 64 * 1024)]
        tail: u64,
        /// Rendered history lines instead of raw bytes.
        #[arg(long)]
        lines: bool,
    },
    /// Print a session's screen as text.
    Screen {
        #[command(flatten)]
        client: ClientArgs,
        session: String,
        /// The snapshot's escape sequences instead of text.
        #[arg(long)]
        raw: bool,
    },
    /// Attach this terminal to a session (detach with Ctrl-]).
    Attach {
        #[command(flatten)]
        client: ClientArgs,
        session: String,
        /// Detach key, as ^X notation (default ^]).
        #[arg(long, default_value = "^]")]
        detach_key: String,
        /// History lines shown above the screen on attach.
        #[arg(long, default_value_t = 1000)]
        scrollback: u64,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Check a config file; errors name the key and the bad value.
    Check { file: PathBuf },
}

fn main() {
    let cli = Cli::parse();
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("termesh: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Node {
            config,
            listen,
            data_dir,
            name,
        } => {
            init_logging();
            let mut cfg = match &config {
                Some(path) => Config::load(path)?,
                None => Config::default(),
            };
            cfg.apply_env()?;
            if let Some(listen) = listen {
                cfg.http.listen = listen
                    .parse()
                    .with_context(|| format!("--listen {listen:?}: not an address:port"))?;
            }
            if let Some(dir) = data_dir {
                cfg.node.data_dir = dir;
            }
            if let Some(name) = name {
                termesh_config::check_name(&name)
                    .map_err(|e| anyhow::anyhow!("--name {name:?}: {e}"))?;
                cfg.node.name = name;
            }
            let node_name = cfg.node.name.clone();
            server::run(cfg, true, None, move |ready| {
                // The banner goes to stdout; a closed stdout (a supervisor
                // that stopped reading) must not take the node down.
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                let _ = writeln!(
                    out,
                    "termesh node `{node_name}` serving on http://{}",
                    ready.addr
                );
                let _ = writeln!(out, "  websocket: ws://{}/ws", ready.addr);
                if let (Some(token), Some(file)) = (&ready.admin_token, &ready.token_file) {
                    let _ = writeln!(out, "  admin token: {token}");
                    let _ = writeln!(
                        out,
                        "  (saved in {}; local clients read it from there)",
                        file.display()
                    );
                }
                let _ = out.flush();
            })?;
            Ok(0)
        }
        Command::Config {
            command: ConfigCommand::Check { file },
        } => {
            let cfg = Config::load(&file)?;
            println!(
                "{}: ok (node `{}`, listen {}, {} token(s))",
                file.display(),
                cfg.node.name,
                cfg.http.listen,
                cfg.auth.tokens.len()
            );
            Ok(0)
        }
        Command::Token { role, name } => {
            let token = termesh_node::token::generate();
            println!("token: {token}");
            println!("\n# add to the node's config file:\n[[auth.tokens]]");
            if let Some(name) = name {
                println!("name = {name:?}");
            }
            println!(
                "hash = \"{}\"\nrole = \"{role}\"",
                termesh_config::hash_token(&token)
            );
            Ok(0)
        }
        other => runtime()?.block_on(run_client(other)),
    }
}

async fn run_client(command: Command) -> anyhow::Result<i32> {
    let target = |c: ClientArgs| Target::resolve(c.url, c.token, c.data_dir);
    match command {
        Command::Ls { client, json } => commands::ls(&target(client)?, json).await.map(|_| 0),
        Command::New {
            client,
            name,
            cwd,
            cols,
            rows,
            attach: and_attach,
            command,
        } => {
            let target = target(client)?;
            let (cols, rows) = match (cols, rows) {
                (None, None) if and_attach => crossterm::terminal::size()
                    .map(|(c, r)| (Some(c.into()), Some(r.into())))
                    .unwrap_or((None, None)),
                other => other,
            };
            let req = CreateRequest {
                command: (!command.is_empty()).then_some(command),
                cwd,
                cols,
                rows,
                name,
                ..Default::default()
            };
            let info = commands::new(&target, req).await?;
            if and_attach {
                let opts = AttachOptions {
                    session: info.id,
                    detach_key: 0x1d,
                    scrollback: 1000,
                };
                return attach(&target, opts).await.map(exit_code);
            }
            println!("{}", info.id);
            Ok(0)
        }
        Command::Kill {
            client,
            session,
            signal,
        } => commands::kill(&target(client)?, session, signal)
            .await
            .map(|_| 0),
        Command::Rm { client, session } => commands::rm(&target(client)?, session).await.map(|_| 0),
        Command::Logs {
            client,
            session,
            tail,
            lines,
        } => commands::logs(&target(client)?, session, tail, lines)
            .await
            .map(|_| 0),
        Command::Screen {
            client,
            session,
            raw,
        } => commands::screen(&target(client)?, session, raw)
            .await
            .map(|_| 0),
        Command::Attach {
            client,
            session,
            detach_key,
            scrollback,
        } => {
            let detach_key = parse_key(&detach_key)?;
            let opts = AttachOptions {
                session,
                detach_key,
                scrollback,
            };
            attach(&target(client)?, opts).await.map(exit_code)
        }
        Command::Node { .. } | Command::Config { .. } | Command::Token { .. } => Ok(0),
    }
}

fn exit_code(end: Ended) -> i32 {
    match end {
        Ended::Detached => 0,
        Ended::Exited(code) => code as i32,
    }
}

/// `^]` style: a control key.
fn parse_key(text: &str) -> anyhow::Result<u8> {
    match text.as_bytes() {
        [b'^', c] if (b'@'..=b'_').contains(&c.to_ascii_uppercase()) => {
            Ok(c.to_ascii_uppercase() - b'@')
        }
        _ => bail!("--detach-key {text:?}: use ^ and a letter or one of @[\\]^_, e.g. ^]"),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TERMESH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
