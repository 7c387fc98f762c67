//! The shipped unit (`deploy/termesh.service`) under a real systemd, in a
//! container booted from this host's own system: installed as
//! docs/operations.md says, with a config that names no data dir (as
//! one started from deploy/termesh.example.toml: the node's user's
//! default, under the unit's `StateDirectory=`, its home). A restart, a
//! kill -9, a stop and an upgrade of the binary (a new file, a restart)
//! each leave its program running, in the unit's cgroup, and the next
//! node serves it; a token added on the machine works after `systemctl
//! reload`; a shutdown of the machine ends
//! the program through its terminal (the keeper's hang-up, from the
//! unit's `ExecStopPost`) before systemd's final sweep would. And a
//! machine on the units of earlier releases moves to this one as
//! docs/operations.md says, ending no program. One machine at a time (a
//! container shares the cgroup nspawn was started in). Skipped, saying
//! why, where this host cannot boot such a container (not root, no
//! systemd-nspawn, no overlayfs).

mod common;

use std::time::Duration;

use common::container::Machine;
use common::unit_cli::Cli;

const BIN: &str = env!("CARGO_BIN_EXE_termesh");
const TOKEN: &str = "unit-admin-token-0123456789abcdef";
/// How long the node in the machine may take for each step.
const WAIT: Duration = common::PATIENCE;
/// The program: answers each line typed, and says what ended it, in a
/// file the host reads after the machine is off: the signal (HUP: its
/// terminal hung up by the keeper; TERM: systemd's) and what ran as PID 1
/// then (`systemd` while units stop; `systemd-shutdow`, cut to 15 bytes,
/// in the final sweep, which ends whatever is left: network and file
/// systems gone). A read that fails (the terminal hung up) is retried a
/// second later rather than at once, so the loop never spins.
const PROGRAM: &str = "echo $$ > /var/lib/termesh/program.pid; \
    trap 'echo \"hup $(cat /proc/1/comm)\" >> /var/lib/termesh/ended-by; exit 0' HUP; \
    trap 'echo \"term $(cat /proc/1/comm)\" >> /var/lib/termesh/ended-by' TERM; \
    while :; do if read -r l; then echo \"got $l\"; else sleep 1; fi; done";

/// The units of earlier releases, when the keeper had one of its own.
const TWO_UNITS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/two-units");

/// Boots a machine once no other test's runs, or says why this host
/// cannot (the test then passes without checking anything, saying so).
/// The guard comes first, so a machine is torn down before it is let go.
fn machine() -> Option<(std::sync::MutexGuard<'static, ()>, Machine)> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    match Machine::boot(std::path::Path::new(BIN)) {
        Ok(m) => Some((one, m)),
        Err(why) => {
            println!("SKIPPED: this host cannot boot a systemd container ({why})");
            None
        }
    }
}

/// Puts the config (no data dir, a token, a free port on loopback), the
/// unit and the units of earlier releases in the machine's
/// `/root/staged`, and makes the termesh user, the binary and
/// `/etc/termesh` as docs/operations.md's step 3 does; answers the
/// command line for it.
fn stage(m: &Machine) -> Cli {
    let port = common::cluster::free_port("127.0.0.1");
    let config = format!(
        "[node]\nname = \"unit\"\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n\n\
         [[auth.tokens]]\nname = \"admin\"\nhash = \"{}\"\nrole = \"admin\"\n",
        termesh_config::hash_token(TOKEN)
    );
    let staged = m.root.join("root/staged");
    std::fs::create_dir_all(staged.join("two-units")).unwrap();
    std::fs::write(staged.join("termesh.toml"), config).unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/termesh.service"),
        staged.join("termesh.service"),
    )
    .unwrap();
    for unit in ["termesh.service", "termesh-keeper.service"] {
        let old = std::path::Path::new(TWO_UNITS).join(unit);
        std::fs::copy(old, staged.join("two-units").join(unit)).unwrap();
    }
    m.sh(
        "useradd --system --home-dir /var/lib/termesh --shell /usr/sbin/nologin termesh \
          && install -m 755 /opt/termesh-build/termesh /usr/local/bin/termesh \
          && install -d -m 750 -g termesh /etc/termesh \
          && install -m 640 -g termesh /root/staged/termesh.toml /etc/termesh/",
    );
    Cli {
        url: format!("http://127.0.0.1:{port}"),
        token: TOKEN.into(),
    }
}

#[test]
fn the_shipped_unit_keeps_programs_across_restarts_and_ends_them_in_order_at_shutdown() {
    let Some((_one, mut m)) = machine() else {
        return;
    };
    let cli = stage(&m);
    // docs/operations.md, "3. On each machine".
    m.sh(
        "install -m 644 /root/staged/termesh.service /etc/systemd/system/ \
          && systemctl daemon-reload && systemctl enable --now termesh",
    );
    let first = main_pid(&mut m);
    let (id, program) = start_program(&mut m, &cli, "one");
    let state = m.root.join("var/lib/termesh");
    // The config names no data dir: the termesh user's default one.
    let data = state.join(".local/share/termesh");
    let keeper = std::fs::read_to_string(data.join("keeper.lock"))
        .expect("the keeper of the node's data dir")
        .trim()
        .to_string();
    let in_unit = |m: &Machine, pid: &str| unit_of(m, pid) == "/system.slice/termesh.service";
    assert!(
        in_unit(&m, &program),
        "the program runs in the unit's cgroup"
    );
    assert!(in_unit(&m, &keeper), "the keeper runs in the unit's cgroup");
    // What the node said until it served (journald may lag behind it).
    let said = m.until("the node's start in the journal", |m| {
        let said = m.sh("journalctl -b -o cat _SYSTEMD_UNIT=termesh.service");
        said.contains("node serving").then_some(said)
    });
    assert!(
        !said.contains(" WARN ") && !said.contains(" ERROR "),
        "the node starts without a warning under the shipped unit:\n{said}"
    );
    // The unit's host-load protection: the node outranks its programs by
    // nice and by the OOM killer's score, the programs run as anyone's
    // (OOMScoreAdjust= needs CAP_SYS_RESOURCE, which this host may lack).
    let node = first.to_string();
    let lowers = m
        .run(&["sh", "-c", "echo -900 > /proc/self/oom_score_adj"])
        .status
        .success();
    let oom = if lowers { "-900" } else { "0" };
    assert_eq!(rank(&m, &node), ("-10".into(), oom.into()), "the node");
    assert_eq!(rank(&m, &program), ("0".into(), "0".into()), "a program");

    // `termesh token add` on the machine, then `systemctl reload`
    // (SIGHUP): the node reads the file the command rewrote.
    let added = m.sh(
        "/usr/local/bin/termesh token add --config /etc/termesh/termesh.toml \
         --role viewer --name later",
    );
    let later = Cli {
        url: cli.url.clone(),
        token: added.strip_prefix("token: ").expect("the token").into(),
    };
    assert!(
        !later.run(&["ls"]).status.success(),
        "not before the reload"
    );
    m.sh("systemctl reload termesh");
    m.until("the added token accepted", |_| {
        later.run(&["ls"]).status.success().then_some(())
    });

    m.sh("systemctl restart termesh");
    let second = main_pid(&mut m);
    assert_ne!(first, second, "a restart starts a new node");
    cli.typed(&id, "two", WAIT);

    m.sh("kill -9 $(systemctl show -p MainPID --value termesh)");
    m.until("the node started again after its crash", |m| {
        (main_pid(m) != second).then_some(())
    });
    assert_eq!(
        m.sh("systemctl show -p NRestarts --value termesh"),
        "1",
        "systemd restarted the node after its crash (Restart=on-failure)"
    );
    cli.typed(&id, "three", WAIT);

    m.sh("systemctl stop termesh");
    assert!(m.alive(&program), "a stop of the unit ends no program");
    assert!(m.alive(&keeper), "a stop of the unit ends no keeper");
    m.sh("systemctl start termesh");
    cli.typed(&id, "four", WAIT);

    // docs/operations.md, "Upgrade the binary with no session lost": a new
    // file renamed over the running one, then a restart; the keeper runs
    // on from the file it was started with.
    m.sh(
        "install -m 755 /opt/termesh-build/termesh /usr/local/bin/termesh \
          && systemctl restart termesh",
    );
    cli.typed(&id, "upgraded", WAIT);
    assert!(m.alive(&program), "an upgrade ends no program");
    assert!(
        m.sh(&format!("readlink /proc/{keeper}/exe"))
            .ends_with("(deleted)"),
        "the same keeper, on the replaced binary"
    );
    assert!(
        in_unit(&m, &program),
        "the program stays in the unit's cgroup"
    );
    assert!(
        !state.join("ended-by").exists(),
        "no program ended before the shutdown"
    );

    // The D-Bus broker may stop before the unit at a shutdown (nothing
    // orders them): the unit must not need it then.
    m.sh("systemctl stop dbus.socket dbus.service");
    m.power_off();
    let ended = std::fs::read_to_string(state.join("ended-by")).unwrap_or_default();
    assert_eq!(
        ended,
        "hup systemd\n",
        "at shutdown the keeper hangs the program's terminal up (ExecStopPost) before \
         systemd's final sweep (TERM) reaches it; console:\n{}",
        m.log()
    );
    let keeper_log = std::fs::read_to_string(data.join("keeper.log")).unwrap_or_default();
    assert!(
        keeper_log.contains("asked to stop (SIGTERM)"),
        "the keeper says why its programs ended:\n{keeper_log}"
    );
}

/// docs/operations.md, "Move from the keeper's own unit", on a machine
/// that runs the two units of earlier releases: the new unit in place,
/// the keeper's unit disabled (not stopped), a restart of the node ends
/// no program and serves it; after the next reboot the keeper's unit
/// stays down and the node's own keeper runs the programs in its unit.
#[test]
fn a_machine_on_the_keepers_own_unit_moves_to_the_one_unit_as_operations_md_says() {
    let Some((_one, mut m)) = machine() else {
        return;
    };
    let cli = stage(&m);
    m.sh("install -m 644 /root/staged/two-units/termesh.service \
           /root/staged/two-units/termesh-keeper.service /etc/systemd/system/ \
          && systemctl daemon-reload && systemctl enable --now termesh");
    let (id, program) = start_program(&mut m, &cli, "before");
    assert!(
        unit_of(&m, &program).ends_with("/termesh-keeper.service"),
        "earlier releases ran programs in the keeper's unit"
    );

    m.sh(
        "install -m 644 /root/staged/termesh.service /etc/systemd/system/ \
          && systemctl daemon-reload && systemctl disable termesh-keeper \
          && systemctl restart termesh",
    );
    cli.typed(&id, "moved", WAIT);
    assert!(m.alive(&program), "moving to the one unit ends no program");
    assert_eq!(m.sh("systemctl is-active termesh-keeper"), "active");

    std::fs::remove_file(m.root.join("var/lib/termesh/program.pid")).unwrap();
    m.reboot();
    assert_eq!(
        m.run(&["systemctl", "is-active", "termesh-keeper"]).stdout,
        b"inactive\n",
        "the keeper's unit, disabled, stays down"
    );
    let (_, program) = start_program(&mut m, &cli, "after");
    assert!(
        unit_of(&m, &program).ends_with("/termesh.service"),
        "after the reboot the programs run in the node's unit"
    );
}

/// Once the node serves: starts `PROGRAM` and waits for its answer to
/// `word`; answers the session and the program's pid (as the container
/// numbers it).
fn start_program(m: &mut Machine, cli: &Cli, word: &str) -> (String, String) {
    cli.serving(WAIT);
    let id = cli.ok(&["new", "--", "sh", "-c", PROGRAM]);
    let written = m.root.join("var/lib/termesh/program.pid");
    let pid = m.until("the program's pid", |_| {
        let pid = std::fs::read_to_string(&written).ok()?;
        (!pid.trim().is_empty()).then(|| pid.trim().to_string())
    });
    cli.typed(&id, word, WAIT);
    (id, pid)
}

/// The systemd cgroup of `pid` (as /proc/<pid>/cgroup names it).
fn unit_of(m: &Machine, pid: &str) -> String {
    let text = m.sh(&format!("cat /proc/{pid}/cgroup"));
    let line = text
        .lines()
        .find(|l| l.contains(":name=systemd:") || l.starts_with("0::"))
        .unwrap_or_else(|| panic!("no systemd cgroup for {pid}: {text}"));
    line.rsplit(':').next().unwrap_or_default().to_string()
}

/// The nice value and `oom_score_adj` of `pid` in the container.
fn rank(m: &Machine, pid: &str) -> (String, String) {
    let nice = m.sh(&format!("ps -o ni= -p {pid}"));
    let oom = m.sh(&format!("cat /proc/{pid}/oom_score_adj"));
    (nice, oom)
}

/// The unit's main pid, as the container numbers it (0 while none).
fn main_pid(m: &mut Machine) -> u32 {
    m.until("the unit's main pid", |m| {
        let out = m.run(&["systemctl", "show", "-p", "MainPID", "--value", "termesh"]);
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|pid| *pid != 0)
    })
}
