//! The shipped unit (`deploy/termesh.service`) under a real systemd, in a
//! container booted from this host's own system: installed as
//! docs/operations.md says, with a config that names no data dir (as
//! one started from deploy/termesh.example.toml: the node's user's
//! default, under the unit's `StateDirectory=`, its home). A restart, a
//! kill -9 and a stop of the node each leave its program running, in the
//! unit's cgroup, and the next node serves it; a shutdown of the machine
//! ends the program through its terminal (the keeper's hang-up, from the
//! unit's `ExecStopPost`) before systemd's final sweep would. Skipped,
//! saying why, where this host cannot boot such a container (not root, no
//! systemd-nspawn, no overlayfs).

mod common;

use std::process::{Command, Output};

use common::container::Machine;

const BIN: &str = env!("CARGO_BIN_EXE_termesh");
const TOKEN: &str = "unit-admin-token-0123456789abcdef";
/// The program: answers each line typed, and says what ended it, in a
/// file the host reads after the machine is off: the signal (HUP: its
/// terminal hung up by the keeper; TERM: systemd's) and what ran as PID 1
/// then (`systemd` while units stop; `systemd-shutdow`, cut to 15 bytes,
/// in the final sweep, which ends whatever is left: network and file
/// systems gone).
const PROGRAM: &str = "echo $$ > /var/lib/termesh/program.pid; \
    trap 'echo \"hup $(cat /proc/1/comm)\" >> /var/lib/termesh/ended-by; exit 0' HUP; \
    trap 'echo \"term $(cat /proc/1/comm)\" >> /var/lib/termesh/ended-by' TERM; \
    while :; do if read -r l; then echo \"got $l\"; else sleep 1; fi; done";

#[test]
fn the_shipped_unit_keeps_programs_across_restarts_and_ends_them_in_order_at_shutdown() {
    let mut m = match Machine::boot(std::path::Path::new(BIN)) {
        Ok(m) => m,
        Err(why) => {
            println!("SKIPPED: this host cannot boot a systemd container ({why})");
            return;
        }
    };
    let port = common::cluster::free_port("127.0.0.1");
    let config = format!(
        "[node]\nname = \"unit\"\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n\n\
         [[auth.tokens]]\nname = \"admin\"\nhash = \"{}\"\nrole = \"admin\"\n",
        termesh_config::hash_token(TOKEN)
    );
    let staged = m.root.join("root/staged");
    std::fs::create_dir_all(&staged).unwrap();
    std::fs::write(staged.join("termesh.toml"), config).unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/termesh.service"),
        staged.join("termesh.service"),
    )
    .unwrap();
    // docs/operations.md, "3. On each machine" (the binary is bound in).
    m.sh(
        "useradd --system --home-dir /var/lib/termesh --shell /usr/sbin/nologin termesh \
          && install -d -m 750 -g termesh /etc/termesh \
          && install -m 640 -g termesh /root/staged/termesh.toml /etc/termesh/ \
          && install -m 644 /root/staged/termesh.service /etc/systemd/system/ \
          && systemctl daemon-reload && systemctl enable --now termesh",
    );
    let cli = Cli {
        url: format!("http://127.0.0.1:{port}"),
        token: TOKEN.into(),
    };
    let first = main_pid(&mut m);
    m.until("the node serving", |_| {
        cli.run(&["ls"]).status.success().then_some(())
    });
    let id = cli.ok(&["new", "--", "sh", "-c", PROGRAM]);
    let state = m.root.join("var/lib/termesh");
    let program = m.until("the program's pid", |_| {
        let pid = std::fs::read_to_string(state.join("program.pid")).ok()?;
        (!pid.trim().is_empty()).then(|| pid.trim().to_string())
    });
    cli.typed(&mut m, &id, "one");
    // The config names no data dir: the termesh user's default one.
    let data = state.join(".local/share/termesh");
    let keeper = std::fs::read_to_string(data.join("keeper.lock"))
        .expect("the keeper of the node's data dir")
        .trim()
        .to_string();
    let in_unit = |m: &Machine, pid: &str| {
        m.sh(&format!("cat /proc/{pid}/cgroup"))
            .lines()
            .any(|l| l.ends_with(":/system.slice/termesh.service"))
    };
    assert!(
        in_unit(&m, &program),
        "the program runs in the unit's cgroup"
    );
    assert!(in_unit(&m, &keeper), "the keeper runs in the unit's cgroup");
    // The unit's host-load protection: the node outranks its programs by
    // nice and by the OOM killer's score, the programs run as anyone's.
    let node = first.to_string();
    let said = m.sh("journalctl -b -o cat _SYSTEMD_UNIT=termesh.service");
    assert!(
        !said.contains(" WARN ") && !said.contains(" ERROR "),
        "the node starts without a warning under the shipped unit:\n{said}"
    );
    // (OOMScoreAdjust= needs CAP_SYS_RESOURCE, which this host may lack.)
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
    cli.typed(&mut m, &id, "two");

    m.sh("kill -9 $(systemctl show -p MainPID --value termesh)");
    m.until("the node started again after its crash", |m| {
        (main_pid(m) != second).then_some(())
    });
    assert_eq!(
        m.sh("systemctl show -p NRestarts --value termesh"),
        "1",
        "systemd restarted the node after its crash (Restart=on-failure)"
    );
    cli.typed(&mut m, &id, "three");

    m.sh("systemctl stop termesh");
    assert!(m.alive(&program), "a stop of the unit ends no program");
    assert!(m.alive(&keeper), "a stop of the unit ends no keeper");
    m.sh("systemctl start termesh");
    cli.typed(&mut m, &id, "four");
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

/// This build's command line, from the host, to the node in the machine.
struct Cli {
    url: String,
    token: String,
}

impl Cli {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .env("TERMESH_URL", &self.url)
            .env("TERMESH_TOKEN", &self.token)
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    }

    /// Its stdout; fails the test when it fails.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "termesh {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Types `word` into session `id` (once the node serves it) and waits
    /// for the program's answer: the node took the program up.
    fn typed(&self, m: &mut Machine, id: &str, word: &str) {
        let answer = format!("got {word}");
        let mut sent = false;
        m.until(&format!("the answer to {word:?}"), |_| {
            if !sent {
                sent = self.run(&["send", id, word]).status.success();
            }
            let read = self.run(&["read", id]);
            String::from_utf8_lossy(&read.stdout)
                .contains(&answer)
                .then_some(())
        });
    }
}
