//! The command line of `termesh`: every subcommand and option, as clap
//! types (what each does is in main.rs and the library).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "termesh",
    version,
    about = "Terminal sessions that survive dropped links",
    after_help = "Sessions are named by id, by a unique id prefix, or by name."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// How clients find the node.
#[derive(clap::Args, Clone)]
pub(crate) struct ClientArgs {
    /// Node URL, e.g. http://127.0.0.1:7420 [default: the URL the node on
    /// the data dir recorded, else the one local node recorded in
    /// $XDG_RUNTIME_DIR/termesh, else http://127.0.0.1:7420]
    #[arg(long, env = "TERMESH_URL", global = true)]
    pub(crate) url: Option<String>,
    /// Access token [default: the admin.token of the found node's data dir]
    #[arg(long, env = "TERMESH_TOKEN", global = true, hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// The node's data dir, where a local node leaves its URL and admin
    /// token [default: $XDG_DATA_HOME/termesh or ~/.local/share/termesh]
    #[arg(long, env = "TERMESH_DATA_DIR", global = true)]
    pub(crate) data_dir: Option<PathBuf>,
    /// CA certificate(s) to trust for an https:// node, e.g. a cluster's
    /// ca.pem [default: the public web roots]
    #[arg(long, env = "TERMESH_CA", global = true)]
    pub(crate) ca: Option<PathBuf>,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
        /// Node name [default: the config's, else `local`]
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
    /// terminals across node restarts (the node starts one when none runs,
    /// in its own cgroup: deploy/termesh.service keeps both there).
    Keeper {
        /// The data dir whose node it serves [default: the config's, else
        /// ~/.local/share/termesh]
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Config file (TOML), for its data dir
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Stop the local node of a data dir (its programs run on under the
    /// PTY keeper); with --keeper, the keeper too, which ends them.
    Stop {
        /// The node's data dir [default: the config's, else
        /// ~/.local/share/termesh]
        #[arg(long, env = "TERMESH_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// Config file (TOML), for its data dir (as `termesh keeper
        /// --config`: deploy/termesh.service stops the keeper by it)
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Also stop the data dir's PTY keeper: the sessions' programs end
        #[arg(long)]
        keeper: bool,
    },
    /// What deploy/termesh.service runs once its node stopped
    /// (ExecStopPost, as root): gives the unit's cgroup back to systemd
    /// for the next node (cgroup v2: `cpu` off for its children), and
    /// when the machine shuts down (`systemctl is-system-running` says
    /// stopping) stops the keeper as `termesh stop --keeper` does.
    Stopped {
        /// The node's data dir [default: the config's, else
        /// ~/.local/share/termesh]
        #[arg(long, env = "TERMESH_DATA_DIR")]
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
    /// Agent hooks: `termesh hooks install claude` (or codex) writes the
    /// hook configuration that reports the agent's turns to termesh,
    /// merged with yours.
    Hooks {
        #[command(subcommand)]
        command: HooksCommand,
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
        /// Only sessions waiting for their person (longest waiting first)
        #[arg(long)]
        waiting: bool,
    },
    /// Start a session and print its id (or attach to it).
    New(NewArgs),
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
    /// Attach to the session that has waited for its person longest,
    /// anywhere in the cluster (detach returns here; `next` again goes on
    /// to the next one). Exits 1 when none waits.
    Next {
        #[command(flatten)]
        client: ClientArgs,
        /// Prefix key, as ^X or C-x: then d detaches
        #[arg(long, env = "TERMESH_DETACH_KEY", default_value = "^]")]
        detach_key: String,
    },
    /// Print every session's state, then each change, as JSON lines
    /// (`waiting`, `working`, `idle`; `exited`, `lost`, `removed`).
    Watch {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Type text into a session as its program expects it, then Enter
    /// (answers an agent without attaching).
    Send {
        #[command(flatten)]
        client: ClientArgs,
        /// Session: id, id prefix or name
        session: String,
        /// The text (at most 64 KiB); `-` reads it from standard input
        text: String,
        /// Type the text without pressing Enter
        #[arg(long)]
        no_submit: bool,
        /// `now`, or `waiting`: once the session waits for its person
        #[arg(long, value_enum, default_value = "now")]
        when: When,
    },
    /// Wait until a session is in one of the given states (exit code 0),
    /// or time out (exit code 124).
    Wait {
        #[command(flatten)]
        client: ClientArgs,
        /// Session: id, id prefix or name
        session: String,
        /// States to wait for, comma-separated: working, waiting, idle,
        /// exited (an ended session always counts as exited)
        #[arg(long, default_value = "waiting,exited", value_delimiter = ',')]
        until: Vec<String>,
        /// How long to wait at most (at most 1h)
        #[arg(long, default_value = "30s", value_parser = termesh_config::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Print what a session printed as plain text (escapes removed,
    /// redraws collapsed); the seq it ends at goes to stderr.
    Read {
        #[command(flatten)]
        client: ClientArgs,
        /// Session: id, id prefix or name
        session: String,
        /// Only what came after this seq (a seq an earlier read printed)
        #[arg(long, default_value_t = 0)]
        since: u64,
        /// Print `{"seq": N, "text": "..."}` instead
        #[arg(long)]
        json: bool,
    },
    /// Search every session's stored output in the cluster (plain text,
    /// as `read` prints it) for a regex; hits print as ID@NODE:SEQ:LINE.
    /// Exit code 0 with hits, 1 without.
    Grep {
        #[command(flatten)]
        client: ClientArgs,
        /// The regex (Rust syntax; `(?i)` for any case)
        pattern: String,
        /// Only this session (id, id prefix or name); again for more
        #[arg(long = "session")]
        sessions: Vec<String>,
        /// Only output of the last DURATION (e.g. 2h)
        #[arg(long, value_parser = termesh_config::parse_duration)]
        since: Option<std::time::Duration>,
        /// Only sessions in this state now: waiting, working, idle
        #[arg(long)]
        state: Option<String>,
        /// Lines of context before and after each hit (at most 10)
        #[arg(short = 'C', long, default_value_t = 0)]
        context: u32,
        /// Stop after this many hits (at most 10000)
        #[arg(long, default_value_t = 1000)]
        max: u32,
        /// One JSON object a hit: session, node, seq, line, before, after
        #[arg(long)]
        json: bool,
    },
    /// Serve the Model Context Protocol on stdin/stdout for an agent
    /// (e.g. `claude mcp add termesh -- termesh mcp`): tools to list,
    /// create, send to, wait for, read, search (grep), screen and kill
    /// sessions.
    Mcp {
        #[command(flatten)]
        client: ClientArgs,
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
    Attach(AttachArgs),
}

#[derive(Subcommand)]
pub(crate) enum ClusterCommand {
    /// Write a CA, certificates, an admin token and one config per node.
    Init {
        /// Folder to write into (refused when not empty, unless --force)
        #[arg(long)]
        out: PathBuf,
        /// A node: NAME,quic=ADDR:PORT,http=ADDR:PORT (repeat per node)
        #[arg(long = "node", required = true)]
        nodes: Vec<termesh_node::cluster::init::NodeSpec>,
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
        node: termesh_node::cluster::init::NodeSpec,
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
pub(crate) enum ConfigCommand {
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
pub(crate) enum TokenCommand {
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

// The options of `termesh new`.
#[derive(clap::Args)]
pub(crate) struct NewArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// Session name, unique on the node [default: none]
    #[arg(long, short)]
    pub(crate) name: Option<String>,
    /// The node of the cluster that runs it [default: the one connected to]
    #[arg(long)]
    pub(crate) node: Option<String>,
    /// Working directory [default: this directory, if the node has it]
    #[arg(long)]
    pub(crate) cwd: Option<String>,
    /// Columns [default: this terminal's with --attach, else the node's]
    #[arg(long)]
    pub(crate) cols: Option<u64>,
    /// Rows [default: this terminal's with --attach, else the node's]
    #[arg(long)]
    pub(crate) rows: Option<u64>,
    /// Attach right away
    #[arg(long, short)]
    pub(crate) attach: bool,
    /// The program and its arguments, after `--` [default: the node's shell]
    #[arg(last = true)]
    pub(crate) command: Vec<String>,
}

// The options of `termesh attach`.
#[derive(clap::Args)]
pub(crate) struct AttachArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// Session: id, id prefix or name [default: the one attached last
    /// through this node while it runs, else the running session with
    /// the most recent output]
    pub(crate) session: Option<String>,
    /// Prefix key, as ^X or C-x: then d detaches, [ scrolls, s takes
    /// the size, the key again sends it
    #[arg(
        long,
        alias = "prefix",
        env = "TERMESH_DETACH_KEY",
        default_value = "^]"
    )]
    pub(crate) detach_key: String,
    /// With --raw: history lines written above the screen on attach
    #[arg(long, default_value_t = 1000)]
    pub(crate) scrollback: u64,
    /// Watch only: send no keys and no size
    #[arg(long)]
    pub(crate) read_only: bool,
    /// Take the session for this terminal alone: other `termesh attach`
    /// clients of it are detached (console viewers stay)
    #[arg(short = 'd', long = "detach-others")]
    pub(crate) detach_others: bool,
    /// Predictive local echo (as mosh): on a link slower than 30 ms,
    /// typed characters show at once, underlined until echoed
    #[arg(long)]
    pub(crate) predict: bool,
    /// Take the mouse while the program has not asked for it: the wheel
    /// scrolls the session's history (the terminal's own selection then
    /// wants Shift, as with tmux's mouse on)
    #[arg(long)]
    pub(crate) mouse: bool,
    /// Open in the scroll mode with the output at SEQ (a `termesh grep`
    /// hit's) at the bottom; `q` goes on live
    #[arg(long, value_name = "SEQ")]
    pub(crate) at: Option<u64>,
    /// Pass the session's bytes through to this terminal instead of
    /// drawing it (for `attach | tee`, or a terminal's own scrollback);
    /// the default when output is not a terminal
    #[arg(long)]
    pub(crate) raw: bool,
}

/// When `send` writes.
#[derive(clap::ValueEnum, Clone, Copy)]
pub(crate) enum When {
    Now,
    Waiting,
}

impl From<When> for termesh_transport::SendWhen {
    fn from(w: When) -> Self {
        match w {
            When::Now => termesh_transport::SendWhen::Now,
            When::Waiting => termesh_transport::SendWhen::Waiting,
        }
    }
}

#[derive(Subcommand)]
pub(crate) enum HooksCommand {
    /// Install AGENT's hooks for this user (claude: ~/.claude/settings.json;
    /// codex: `notify` in ~/.codex/config.toml; gemini:
    /// ~/.gemini/settings.json), merged with what is there
    Install {
        /// claude, codex or gemini
        #[arg(value_parser = ["claude", "codex", "gemini"])]
        agent: String,
        /// The home folder to write under [default: $HOME]
        #[arg(long, env = "HOME")]
        home: PathBuf,
    },
}
