//! The `termesh` command: run a node, check a config, make a token, and the
//! protocol clients (`ls`, `new`, `kill`, `rm`, `rename`, `logs`, `screen`,
//! `attach`).

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Parser;
use termesh_config::Config;
use termesh_node::client::attach::{attach, AttachOptions};
use termesh_node::client::resolve::describe;
use termesh_node::client::{agents, commands, ls, stored, Target};
use termesh_node::server;
use termesh_transport::CreateRequest;

mod args;
mod edit_files;
use args::{AttachArgs, Cli, ClientArgs, Command, ConfigCommand, HooksCommand, NewArgs};

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
        Command::Stop {
            data_dir,
            config,
            keeper,
        } => termesh_node::stop::stop(&data_dir_of(data_dir, config)?, keeper),
        Command::Stopped { data_dir, config } => {
            termesh_node::stop::stopped(|| data_dir_of(data_dir, config))
        }
        Command::Keeper { data_dir, config } => {
            init_logging();
            termesh_node::keeper::run(&data_dir_of(data_dir, config)?)?;
            Ok(0)
        }
        Command::Node {
            config,
            listen,
            data_dir,
            name,
            no_store,
            no_keeper,
        } => node(
            config,
            NodeFlags {
                listen,
                data_dir,
                name,
                no_store,
                no_keeper,
            },
        ),
        Command::Config {
            command: ConfigCommand::Check { file },
        } => {
            let cfg = termesh_node::cluster::init::check(&file)?;
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
        Command::Cluster { command } => edit_files::cluster(command),
        Command::Token { command } => edit_files::token(command),
        Command::Hooks {
            command: HooksCommand::Install { agent, home },
        } => {
            match termesh_node::hooks::install(&agent, &home)? {
                Some(path) => println!(
                    "{agent}'s hooks are in {}: sessions it runs in report to termesh \
                     (check: `termesh events ID` shows `hook` events after a turn)",
                    path.display()
                ),
                None => println!("{agent}'s termesh hooks are installed already"),
            }
            Ok(0)
        }
        other => runtime()?.block_on(run_client(other)),
    }
}

async fn run_client(command: Command) -> anyhow::Result<i32> {
    match command {
        Command::Ls {
            client,
            json,
            all,
            waiting,
        } => ls::ls(&target(client)?, json, all, waiting)
            .await
            .map(|_| 0),
        Command::Nodes { client, json } => commands::nodes(&target(client)?, json).map(|_| 0),
        Command::Config {
            command: ConfigCommand::Reload { client },
        } => commands::reload(&target(client)?).map(|_| 0),
        Command::New(args) => new_session(args).await,
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
        Command::Next { client, detach_key } => next(client, &detach_key).await,
        Command::Watch { client } => agents::watch(&target(client)?).await.map(|_| 0),
        Command::Send {
            client,
            session,
            text,
            no_submit,
            when,
        } => agents::send(&target(client)?, &session, &text, no_submit, when.into())
            .await
            .map(|_| 0),
        Command::Grep {
            client,
            pattern,
            sessions,
            since,
            state,
            context,
            max,
            json,
        } => {
            let args = termesh_node::client::grep::GrepArgs {
                pattern,
                sessions,
                since,
                state,
                context,
                max,
                json,
            };
            termesh_node::client::grep::grep(&target(client)?, args).await
        }
        Command::Mcp { client } => termesh_node::client::mcp::serve(target(client)?)
            .await
            .map(|_| 0),
        Command::Wait {
            client,
            session,
            until,
            timeout,
        } => agents::wait(&target(client)?, &session, until, timeout).await,
        Command::Read {
            client,
            session,
            since,
            json,
        } => agents::read(&target(client)?, &session, since, json)
            .await
            .map(|_| 0),
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
        Command::Attach(args) => attach_session(args).await,
        Command::Node { .. }
        | Command::Hooks { .. }
        | Command::Keeper { .. }
        | Command::Stop { .. }
        | Command::Stopped { .. }
        | Command::Config { .. }
        | Command::Cluster { .. }
        | Command::Token { .. } => Ok(0),
    }
}

/// `--data-dir`, else the data dir of `--config`'s file, else the default.
fn data_dir_of(data_dir: Option<PathBuf>, config: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    Ok(match (data_dir, config) {
        (Some(dir), _) => dir,
        (None, Some(path)) => termesh_config::Config::data_dir_in(&path)?,
        (None, None) => termesh_config::default_data_dir(),
    })
}

/// The options of `termesh node` that override the config.
struct NodeFlags {
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    name: Option<String>,
    no_store: bool,
    no_keeper: bool,
}

/// `termesh node`: the config (or the defaults) with the flags over it,
/// served until SIGTERM.
fn node(config: Option<PathBuf>, flags: NodeFlags) -> anyhow::Result<i32> {
    let NodeFlags {
        listen,
        data_dir,
        name,
        no_store,
        no_keeper,
    } = flags;
    init_logging();
    let mut cfg = match &config {
        Some(path) => termesh_node::cluster::init::check(path)?,
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
        termesh_config::check_name(&name).map_err(|e| anyhow::anyhow!("--name {name:?}: {e}"))?;
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
        let login = if ready.admin_token.is_some() {
            "log in with the admin token below"
        } else {
            "log in with a token of the config's [[auth.tokens]]"
        };
        let _ = writeln!(out, "  console: {http}://{}/ ({login})", ready.addr);
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

/// `termesh cluster init | add-node | remove-node | rotate-ca`.
fn target(c: ClientArgs) -> anyhow::Result<Target> {
    Target::resolve(c.url, c.token, c.data_dir, c.ca)
}

/// `termesh new`: creates a session, and attaches to it with `--attach`.
async fn new_session(args: NewArgs) -> anyhow::Result<i32> {
    let target = target(args.client)?;
    let (cols, rows) = match (args.cols, args.rows) {
        (None, None) if args.attach => crossterm::terminal::size()
            .map(|(c, r)| (Some(c.into()), Some(r.into())))
            .unwrap_or((None, None)),
        other => other,
    };
    let req = CreateRequest {
        command: (!args.command.is_empty()).then_some(args.command),
        cwd: args.cwd,
        cols,
        rows,
        name: args.name,
        node: args.node,
        ..Default::default()
    };
    let info = commands::new(&target, req).await?;
    if !args.attach {
        println!("{}", info.id);
        return Ok(0);
    }
    let opts = attach_options(info, 0x1d);
    attach(&target, opts).await.map(|end| end.exit_code())
}

/// Attaching to `info` with `prefix` and the defaults (`new --attach`,
/// `next`; `attach` sets its flags over them).
fn attach_options(info: termesh_transport::SessionInfo, prefix: u8) -> AttachOptions {
    AttachOptions {
        label: describe(&info),
        title: info.name.clone().unwrap_or_else(|| info.id.clone()),
        session: info.id,
        prefix,
        scrollback: 1000,
        read_only: false,
        raw: !std::io::stdout().is_terminal(),
        take: false,
        predict: false,
        mouse: false,
        at: None,
    }
}

/// `termesh attach`.
async fn attach_session(args: AttachArgs) -> anyhow::Result<i32> {
    let prefix = parse_key(&args.detach_key)?;
    let target = target(args.client)?;
    let info = commands::pick(&target, args.session.as_deref()).await?;
    let opts = AttachOptions {
        scrollback: args.scrollback,
        read_only: args.read_only,
        raw: args.raw || !std::io::stdout().is_terminal(),
        take: args.detach_others,
        predict: args.predict,
        mouse: args.mouse,
        at: args.at,
        ..attach_options(info, prefix)
    };
    attach(&target, opts).await.map(|end| end.exit_code())
}

/// `termesh next`: attaches to the session waiting longest; 1 when none.
async fn next(client: ClientArgs, detach_key: &str) -> anyhow::Result<i32> {
    let prefix = parse_key(detach_key)?;
    let target = target(client)?;
    let Some(info) = agents::pick_next(&target).await? else {
        eprintln!("no session is waiting for you");
        return Ok(1);
    };
    if let Some(question) = &info.waiting_for {
        eprintln!("{} asks: {question}", describe(&info));
    }
    let opts = attach_options(info, prefix);
    attach(&target, opts).await.map(|end| end.exit_code())
}

/// The configs a membership change edited, and how each node applies its
/// own.
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
