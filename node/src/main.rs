//! The `termesh` command: run a node, check a config, make a token, and the
//! protocol clients (`ls`, `new`, `kill`, `rm`, `rename`, `logs`, `screen`,
//! `attach`).

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use termesh_config::Config;
use termesh_node::client::attach::{attach, AttachOptions};
use termesh_node::client::resolve::describe;
use termesh_node::client::{commands, ls, stored, Target};
use termesh_node::server;
use termesh_transport::CreateRequest;

#[derive(Parser)]
#[command(
    name = "termesh",
    version,
    about = "Terminal sessions that survive dropped links",
    after_help = "Sessions are named by id, by a unique id prefix, or by name."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// How clients find the node.
#[derive(clap::Args, Clone)]
struct ClientArgs {
    /// Node URL, e.g. http://127.0.0.1:7420 [default: the URL the node on
    /// the data dir recorded, else the one local node recorded in
    /// $XDG_RUNTIME_DIR/termesh, else http://127.0.0.1:7420]
    #[arg(long, env = "TERMESH_URL", global = true)]
    url: Option<String>,
    /// Access token [default: the admin.token of the found node's data dir]
    #[arg(long, env = "TERMESH_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
    /// The node's data dir, where a local node leaves its URL and admin
    /// token [default: $XDG_DATA_HOME/termesh or ~/.local/share/termesh]
    #[arg(long, env = "TERMESH_DATA_DIR", global = true)]
    data_dir: Option<PathBuf>,
    /// CA certificate(s) to trust for an https:// node, e.g. a cluster's
    /// ca.pem [default: the public web roots]
    #[arg(long, env = "TERMESH_CA", global = true)]
    ca: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node (single-node defaults without a config file).
    Node {
        /// Config file (TOML) [default: none, single-node defaults]
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// HTTP listen address [default: the config's, else 127.0.0.1:7420]
        #[arg(long)]
        listen: Option<String>,
        /// Data dir [default: the config's, else ~/.local/share/termesh]
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Node name [default: the config's, else the host name]
        #[arg(long)]
        name: Option<String>,
        /// Run without persistence: sessions, output and events are not
        /// stored and die with the process [default: stored in the data
        /// dir's store/]
        #[arg(long)]
        no_store: bool,
        /// Run programs as this process's children, so they end with it,
        /// instead of under the data dir's PTY keeper (`termesh keeper`),
        /// where they outlive the node's restarts [default: the keeper,
        /// started when none runs]
        #[arg(long)]
        no_keeper: bool,
    },
    /// The PTY keeper of a data dir: holds the node's programs and their
    /// terminals across node restarts (the node starts one when none runs;
    /// deploy/termesh-keeper.service runs it under systemd).
    Keeper {
        /// The data dir whose node it serves [default: the config's, else
        /// ~/.local/share/termesh]
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Config file (TOML), for its data dir
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Config file tools.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Cluster set-up.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Access tokens: make one (into a config file), revoke one, list them.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// The cluster's nodes: link state, RTT, breaker, stall, sessions (admin).
    Nodes {
        #[command(flatten)]
        client: ClientArgs,
        /// Print JSON (as /api/v1/nodes) instead of a table
        #[arg(long)]
        json: bool,
    },
    /// List sessions (rows cut to the terminal's width; ended ones hidden
    /// unless --all).
    Ls {
        #[command(flatten)]
        client: ClientArgs,
        /// Print JSON (the protocol's SessionInfo, every session) instead
        /// of a table
        #[arg(long)]
        json: bool,
        /// Also list ended sessions (exited, lost) [default: hidden, and
        /// counted on stderr]
        #[arg(long, short)]
        all: bool,
    },
    /// Start a session and print its id (or attach to it).
    New {
        #[command(flatten)]
        client: ClientArgs,
        /// Session name, unique on the node [default: none]
        #[arg(long, short)]
        name: Option<String>,
        /// The node of the cluster that runs it [default: the one connected to]
        #[arg(long)]
        node: Option<String>,
        /// Working directory [default: this directory, if the node has it]
        #[arg(long)]
        cwd: Option<String>,
        /// Columns [default: this terminal's with --attach, else the node's]
        #[arg(long)]
        cols: Option<u64>,
        /// Rows [default: this terminal's with --attach, else the node's]
        #[arg(long)]
        rows: Option<u64>,
        /// Attach right away
        #[arg(long, short)]
        attach: bool,
        /// The program and its arguments, after `--` [default: the node's shell]
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Signal sessions' processes (TERM, then KILL after a grace time).
    Kill {
        #[command(flatten)]
        client: ClientArgs,
        /// Sessions: ids, id prefixes or names
        #[arg(required = true)]
        sessions: Vec<String>,
        /// Signal to send
        #[arg(long, short, default_value = "TERM", value_parser = ["TERM", "KILL", "HUP", "INT"])]
        signal: String,
    },
    /// Remove sessions (killing them first if they run).
    Rm {
        #[command(flatten)]
        client: ClientArgs,
        /// Sessions: ids, id prefixes or names
        #[arg(required = true)]
        sessions: Vec<String>,
        /// Also wipe their stored output and events now [default: kept
        /// until the store's vacuum]
        #[arg(long)]
        purge: bool,
    },
    /// Rename a session (names are unique on a node).
    Rename {
        #[command(flatten)]
        client: ClientArgs,
        /// Session: id, id prefix or name
        session: String,
        /// The new name (at most 256 bytes, no control characters)
        name: String,
    },
    /// Run an exited or lost session's command again (same id, in its
    /// cwd; its output continues after the old).
    Revive {
        #[command(flatten)]
        client: ClientArgs,
        /// Session: id, id prefix or name
        session: String,
    },
    /// Print a session's stored events as JSON lines.
    Events {
        #[command(flatten)]
        client: ClientArgs,
        /// Session: id, id prefix or name
        session: String,
        /// Only events after this id
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Keep printing new events as they come
        #[arg(long, short)]
        follow: bool,
    },
    /// Write a session's stored output as an asciicast v2 file (play it
    /// with `asciinema play`).
    Export {
        #[command(flatten)]
        client: ClientArgs,
        /// Session: id, id prefix or name
        session: String,
        /// File to write [default: standard output]
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Print a session's recent raw output, or its rendered history.
    Logs {
        #[command(flatten)]
        client: ClientArgs,
        /// Session: id, id prefix or name
        session: String,
        /// Bytes of raw output to print
        #[arg(long, default_value_t = 64 * 1024)]
        tail: u64,
        /// Rendered history lines instead of raw bytes
        #[arg(long)]
        lines: bool,
    },
    /// Print a session's screen as text.
    Screen {
        #[command(flatten)]
        client: ClientArgs,
        /// Session: id, id prefix or name
        session: String,
        /// The snapshot's escape sequences instead of text
        #[arg(long)]
        raw: bool,
    },
    /// Attach this terminal to a session (prefix key, then d, detaches).
    Attach {
        #[command(flatten)]
        client: ClientArgs,
        /// Session: id, id prefix or name [default: the one attached last
        /// through this node while it runs, else the running session with
        /// the most recent output]
        session: Option<String>,
        /// Prefix key, as ^X or C-x: then d detaches, [ scrolls, s takes
        /// the size, the key again sends it
        #[arg(
            long,
            alias = "prefix",
            env = "TERMESH_DETACH_KEY",
            default_value = "^]"
        )]
        detach_key: String,
        /// With --raw: history lines written above the screen on attach
        #[arg(long, default_value_t = 1000)]
        scrollback: u64,
        /// Watch only: send no keys and no size
        #[arg(long)]
        read_only: bool,
        /// Take the session for this terminal alone: other `termesh attach`
        /// clients of it are detached (console viewers stay)
        #[arg(short = 'd', long = "detach-others")]
        detach_others: bool,
        /// Predictive local echo (as mosh): on a link slower than 30 ms,
        /// typed characters show at once, underlined until echoed
        #[arg(long)]
        predict: bool,
        /// Take the mouse while the program has not asked for it: the wheel
        /// scrolls the session's history (the terminal's own selection then
        /// wants Shift, as with tmux's mouse on)
        #[arg(long)]
        mouse: bool,
        /// Pass the session's bytes through to this terminal instead of
        /// drawing it (for `attach | tee`, or a terminal's own scrollback);
        /// the default when output is not a terminal
        #[arg(long)]
        raw: bool,
    },
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Write a CA, certificates, an admin token and one config per node.
    Init {
        /// Folder to write into (refused when not empty, unless --force)
        #[arg(long)]
        out: PathBuf,
        /// A node: NAME,quic=ADDR:PORT,http=ADDR:PORT (repeat per node)
        #[arg(long = "node", required = true)]
        nodes: Vec<termesh_node::cluster_init::NodeSpec>,
        /// Write into a folder that is not empty (files there are replaced)
        #[arg(long)]
        force: bool,
        /// Also issue each node an HTTPS certificate from the cluster CA and
        /// serve HTTPS (clients then pass --ca ca.pem)
        #[arg(long)]
        http_tls: bool,
        /// Every node's data dir: a path on the node's machine (e.g.
        /// /var/lib/termesh for deploy/termesh.service) [default: `data`,
        /// beside its config]
        #[arg(long = "nodes-data-dir", value_name = "DIR")]
        nodes_data_dir: Option<String>,
    },
    /// Add a node to a running cluster: sign it with the CA in DIR (the
    /// folder `init` wrote), write DIR/NAME/, and add it to every other
    /// node's config there (then `termesh config reload` on each).
    AddNode {
        /// The folder `cluster init --out` wrote
        #[arg(long)]
        dir: PathBuf,
        /// The new node: NAME,quic=ADDR:PORT,http=ADDR:PORT
        #[arg(long)]
        node: termesh_node::cluster_init::NodeSpec,
    },
    /// Rotate the cluster CA without a split: a new CA, new certificates
    /// and a trust bundle of both in DIR (then `termesh config reload` on
    /// each node, one at a time); `--finish`, once all have them, drops
    /// the old CA (then reload each again).
    RotateCa {
        /// The folder `cluster init --out` wrote
        #[arg(long)]
        dir: PathBuf,
        /// Drop the old CA (the second step)
        #[arg(long)]
        finish: bool,
    },
    /// Take a node out of a cluster: out of every other node's config in
    /// DIR, its folder marked REMOVED (then `termesh config reload` on
    /// each, and stop the node).
    RemoveNode {
        /// The folder `cluster init --out` wrote
        #[arg(long)]
        dir: PathBuf,
        /// The node's name
        name: String,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Check a config file; errors name the key and the bad value.
    Check {
        /// The config file (TOML)
        file: PathBuf,
    },
    /// Make the running node read its config file again and apply token
    /// changes (as SIGHUP does); needs an admin token.
    Reload {
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Make a new token: with --config its hash is added to that file
    /// (then `termesh config reload`), else the lines to add are printed.
    /// The token is shown once.
    Add {
        /// What the token may do
        #[arg(long, default_value = "operator", value_parser = ["viewer", "operator", "admin"])]
        role: String,
        /// Its name: shown in logs, and how it is revoked
        #[arg(long)]
        name: String,
        /// The config file to add it to, repeated for every node of a
        /// cluster (one token in each) [default: print the lines]
        #[arg(long, short)]
        config: Vec<PathBuf>,
    },
    /// Remove the token named NAME from a config file (then `termesh
    /// config reload`: connections using it are closed).
    Revoke {
        /// The token's name
        name: String,
        /// The config file, repeated for every node of a cluster
        #[arg(long, short, required = true)]
        config: Vec<PathBuf>,
    },
    /// The tokens of a config file: names and roles.
    List {
        /// The config file
        #[arg(long, short)]
        config: PathBuf,
    },
}

fn main() {
    let cli = Cli::parse();
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("termesh: {}", termesh_node::client::human(&e));
            1
        }
    };
    std::process::exit(code);
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Keeper { data_dir, config } => {
            init_logging();
            let dir = match (data_dir, config) {
                (Some(dir), _) => dir,
                (None, Some(path)) => termesh_config::Config::data_dir_in(&path)?,
                (None, None) => termesh_config::default_data_dir(),
            };
            termesh_node::keeper::run(&dir)?;
            Ok(0)
        }
        Command::Node {
            config,
            listen,
            data_dir,
            name,
            no_store,
            no_keeper,
        } => {
            init_logging();
            let mut cfg = match &config {
                Some(path) => termesh_node::cluster_init::check(path)?,
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
            if no_store {
                cfg.store.enabled = false;
            }
            if no_keeper {
                cfg.node.keeper = false;
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
                let (http, ws) = if ready.tls {
                    ("https", "wss")
                } else {
                    ("http", "ws")
                };
                let _ = writeln!(
                    out,
                    "termesh node `{node_name}` serving on {http}://{}",
                    ready.addr
                );
                let _ = writeln!(out, "  websocket: {ws}://{}/ws", ready.addr);
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
            let cfg = termesh_node::cluster_init::check(&file)?;
            let cluster = match &cfg.cluster {
                Some(c) => format!(
                    ", cluster `{}` of {} nodes, certificate ok",
                    c.id,
                    c.nodes.len()
                ),
                None => String::new(),
            };
            println!(
                "{}: ok (node `{}`, listen {}, {} token(s){cluster})",
                file.display(),
                cfg.node.name,
                cfg.http.listen,
                cfg.auth.tokens.len()
            );
            Ok(0)
        }
        Command::Cluster {
            command:
                ClusterCommand::Init {
                    out,
                    nodes,
                    force,
                    http_tls,
                    nodes_data_dir,
                },
        } => {
            let options = termesh_node::cluster_init::InitOptions {
                force,
                http_tls,
                data_dir: nodes_data_dir,
            };
            let written = termesh_node::cluster_init::init(&out, &nodes, &options)?;
            println!(
                "cluster `{}`: {} nodes written to {}",
                written.id,
                written.configs.len(),
                out.display()
            );
            for path in &written.configs {
                println!("  termesh node --config {}", path.display());
            }
            println!(
                "admin token (also in {}): {}",
                out.join("admin.token").display(),
                written.token
            );
            Ok(0)
        }
        Command::Cluster {
            command: ClusterCommand::AddNode { dir, node },
        } => {
            let changed = termesh_node::cluster_members::add_node(&dir, &node)?;
            println!(
                "node `{}` written to {}",
                node.name,
                changed.node.parent().unwrap_or(&dir).display()
            );
            print_edited(&changed.edited);
            println!(
                "then copy {} to the new node's machine and start it: termesh node --config {}",
                changed.node.parent().unwrap_or(&dir).display(),
                changed.node.display()
            );
            Ok(0)
        }
        Command::Cluster {
            command: ClusterCommand::RemoveNode { dir, name },
        } => {
            let changed = termesh_node::cluster_members::remove_node(&dir, &name)?;
            println!(
                "node `{name}` removed; its folder {} is marked REMOVED (delete it once the node is stopped)",
                changed.node.display()
            );
            print_edited(&changed.edited);
            println!("then stop node `{name}`");
            Ok(0)
        }
        Command::Cluster {
            command: ClusterCommand::RotateCa { dir, finish },
        } => {
            let written = if finish {
                termesh_node::cluster_rotate::finish(&dir)?
            } else {
                termesh_node::cluster_rotate::rotate(&dir)?
            };
            if finish {
                println!("the old CA is dropped: ca.pem holds the new CA only");
            } else {
                println!("a new CA is issued (the old one is in ca.old.pem until --finish); every node has a new certificate and trusts both CAs");
            }
            print_edited(&written);
            if !finish {
                println!(
                    "once every node has reloaded: termesh cluster rotate-ca --dir {} --finish",
                    dir.display()
                );
            }
            Ok(0)
        }
        Command::Token { command } => token(command),
        other => runtime()?.block_on(run_client(other)),
    }
}

async fn run_client(command: Command) -> anyhow::Result<i32> {
    let target = |c: ClientArgs| Target::resolve(c.url, c.token, c.data_dir, c.ca);
    match command {
        Command::Ls { client, json, all } => ls::ls(&target(client)?, json, all).await.map(|_| 0),
        Command::Nodes { client, json } => commands::nodes(&target(client)?, json).map(|_| 0),
        Command::Config {
            command: ConfigCommand::Reload { client },
        } => commands::reload(&target(client)?).map(|_| 0),
        Command::New {
            client,
            name,
            node,
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
                node,
                ..Default::default()
            };
            let info = commands::new(&target, req).await?;
            if and_attach {
                let opts = AttachOptions {
                    label: describe(&info),
                    title: info.name.clone().unwrap_or_else(|| info.id.clone()),
                    session: info.id,
                    prefix: 0x1d,
                    scrollback: 1000,
                    read_only: false,
                    raw: !std::io::stdout().is_terminal(),
                    take: false,
                    predict: false,
                    mouse: false,
                };
                return attach(&target, opts).await.map(|end| end.exit_code());
            }
            println!("{}", info.id);
            Ok(0)
        }
        Command::Kill {
            client,
            sessions,
            signal,
        } => commands::kill(&target(client)?, &sessions, &signal).await,
        Command::Rm {
            client,
            sessions,
            purge,
        } => commands::rm(&target(client)?, &sessions, purge).await,
        Command::Rename {
            client,
            session,
            name,
        } => commands::rename(&target(client)?, &session, &name)
            .await
            .map(|_| 0),
        Command::Revive { client, session } => {
            stored::revive(&target(client)?, &session).await.map(|_| 0)
        }
        Command::Events {
            client,
            session,
            after,
            follow,
        } => stored::events(&target(client)?, &session, after, follow)
            .await
            .map(|_| 0),
        Command::Export {
            client,
            session,
            output,
        } => stored::export(&target(client)?, &session, output.as_deref())
            .await
            .map(|_| 0),
        Command::Logs {
            client,
            session,
            tail,
            lines,
        } => commands::logs(&target(client)?, &session, tail, lines)
            .await
            .map(|_| 0),
        Command::Screen {
            client,
            session,
            raw,
        } => commands::screen(&target(client)?, &session, raw)
            .await
            .map(|_| 0),
        Command::Attach {
            client,
            session,
            detach_key,
            scrollback,
            read_only,
            raw,
            detach_others,
            predict,
            mouse,
        } => {
            let prefix = parse_key(&detach_key)?;
            let target = target(client)?;
            let info = commands::pick(&target, session.as_deref()).await?;
            let opts = AttachOptions {
                label: describe(&info),
                title: info.name.clone().unwrap_or_else(|| info.id.clone()),
                session: info.id,
                prefix,
                scrollback,
                read_only,
                raw: raw || !std::io::stdout().is_terminal(),
                take: detach_others,
                predict,
                mouse,
            };
            attach(&target, opts).await.map(|end| end.exit_code())
        }
        Command::Node { .. }
        | Command::Keeper { .. }
        | Command::Config { .. }
        | Command::Cluster { .. }
        | Command::Token { .. } => Ok(0),
    }
}

/// The configs a membership change edited, and how each node applies its
/// own.
fn print_edited(edited: &[PathBuf]) {
    println!(
        "edited (copy each node's folder to it, then `termesh config reload` there, or SIGHUP):"
    );
    for path in edited {
        println!("  {}", path.display());
    }
}

/// `termesh token add | revoke | list`.
fn token(command: TokenCommand) -> anyhow::Result<i32> {
    use termesh_node::token_file;
    match command {
        TokenCommand::Add { role, name, config } if config.is_empty() => {
            let token = termesh_node::token::generate();
            println!("token: {token}");
            println!("\n# add to the node's config file:\n[[auth.tokens]]");
            println!("name = {name:?}");
            println!(
                "hash = \"{}\"\nrole = \"{role}\"",
                termesh_config::hash_token(&token)
            );
        }
        TokenCommand::Add { role, name, config } => {
            let token = token_file::add(&config, &role, &name)?;
            println!("token: {token}");
            eprintln!(
                "added {name:?} ({role}) to {}; shown once, only its hash is kept. \
                 Apply it with `termesh config reload` (or SIGHUP to the node).",
                files(&config)
            );
        }
        TokenCommand::Revoke { name, config } => {
            let n = token_file::revoke(&config, &name)?;
            eprintln!(
                "revoked {name:?} ({n} entr{}) in {}; apply it with `termesh config reload`",
                if n == 1 { "y" } else { "ies" },
                files(&config)
            );
        }
        TokenCommand::List { config } => {
            for (name, role) in token_file::list(&config)? {
                println!("{name:<24} {role}");
            }
        }
    }
    Ok(0)
}

fn files(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

/// `^]` style: a control key.
/// `^]`, `C-]`, `^a`, `C-A`: a control key's byte.
fn parse_key(text: &str) -> anyhow::Result<u8> {
    match text.as_bytes() {
        [b'^', c] | [b'C' | b'c', b'-', c] if (b'@'..=b'_').contains(&c.to_ascii_uppercase()) => {
            Ok(c.to_ascii_uppercase() - b'@')
        }
        _ => bail!(
            "--detach-key {text:?}: use ^ (or C-) and a letter or one of @[\\]^_, e.g. ^] or C-a"
        ),
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
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,actix_server=warn"));
    // Colour only on a terminal: a log file or the journal gets plain text.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        // A log that cannot be written (a full or dead disk under the log
        // file) loses lines; reporting that on stderr too would panic.
        .log_internal_errors(false)
        .init();
}
