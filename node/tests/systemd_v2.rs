//! The shipped unit (`deploy/termesh.service`) under a real systemd on the
//! unified cgroup v2 hierarchy with the `cpu` controller: a virtual
//! machine booted from this host's own system (common/vm.rs; systemd 252,
//! as Debian 12 has, which ignores the unit's `DelegateSubgroup=`), for
//! hosts whose own cgroups (v1 here) cannot give that. The unit: under
//! the previous release's unit the node leaves the unit's cgroup whole
//! and restarts; under this one it makes its `node` subgroup, weighs a
//! flood in `termesh-bulk`, and every way the node ends (restart, kill
//! -9, stop) starts the next one, the programs served. About 20-40 s a boot under emulation (this host's
//! KVM runs no stock kernel). Skipped, saying why, where this host cannot
//! boot such a machine (not root, no QEMU, no Debian kernel, no static
//! busybox).

mod common;

use std::time::{Duration, Instant};

use common::unit_cli::Cli;
use common::vm::Machine;

const BIN: &str = env!("CARGO_BIN_EXE_termesh");
const TOKEN: &str = "unit-admin-token-0123456789abcdef";
/// How long the node in the machine may take for each step (under
/// emulation its start takes seconds).
const WAIT: Duration = Duration::from_secs(180);
/// The node's port inside the machine.
const NODE: u16 = 7000;
/// The shipped unit's cgroup.
const UNIT: &str = "/sys/fs/cgroup/system.slice/termesh.service";

/// Boots a machine forwarding guest port `NODE`, or says why this host
/// cannot (the test then passes without checking anything, saying so).
fn machine() -> Option<Machine> {
    let started = Instant::now();
    match Machine::boot(std::path::Path::new(BIN), &[NODE]) {
        Ok(m) => {
            println!("booted in {:.1?} ({})", started.elapsed(), m.accel);
            Some(m)
        }
        Err(why) => {
            println!("SKIPPED: this host cannot boot a systemd virtual machine ({why})");
            None
        }
    }
}

/// deploy/termesh.service under systemd 252 (which ignores
/// `DelegateSubgroup=`) on cgroup v2: the node moves itself, its keeper
/// and their programs into the unit's `node` subgroup, gives `cpu` to
/// the unit's children and moves a flood nobody types into to
/// `termesh-bulk`, whose tasks run only on idle CPU; the unit's
/// `ExecStopPost` (`termesh stopped`) gives the controller back so
/// that a restart, a crash and a stop each start the next node (systemd
/// puts it in the unit's cgroup, which the kernel refuses while its
/// children have `cpu`), and the programs run on, served.
#[test]
fn the_shipped_unit_weighs_floods_on_cgroup_v2_with_a_systemd_before_254() {
    let Some(mut m) = machine() else {
        return;
    };
    // The machine: cgroup v2, whose root offers `cpu`, and the systemd
    // that ignores DelegateSubgroup=.
    assert_eq!(m.sh("stat -fc %T /sys/fs/cgroup"), "cgroup2fs");
    let offered = m.sh("cat /sys/fs/cgroup/cgroup.controllers");
    assert!(
        offered.split_whitespace().any(|c| c == "cpu"),
        "the root cgroup offers cpu: {offered}"
    );
    let version: u32 = m
        .sh("systemctl --version | head -n 1 | cut -d' ' -f2")
        .parse()
        .expect("systemd's version");
    let config = format!(
        "[node]\nname = \"unit\"\n\n[http]\nlisten = \"0.0.0.0:{NODE}\"\n\n\
         [[auth.tokens]]\nname = \"admin\"\nhash = \"{}\"\nrole = \"admin\"\n",
        termesh_config::hash_token(TOKEN)
    );
    m.put("/root/staged/termesh.toml", config.as_bytes());
    m.put(
        "/root/staged/termesh.service",
        include_bytes!("../../deploy/termesh.service"),
    );
    m.put(
        "/root/staged/before/termesh.service",
        include_bytes!("fixtures/unit-before-split/termesh.service"),
    );
    let cli = Cli {
        url: format!("http://{}", m.addr(NODE)),
        token: TOKEN.into(),
    };
    // docs/operations.md, "3. On each machine", with the unit of the
    // release before this one: this binary leaves that unit's cgroup
    // whole (the unit would give no `cpu` back at a stop), so its
    // restarts keep working.
    m.sh(
        "useradd --system --home-dir /var/lib/termesh --shell /usr/sbin/nologin termesh \
          && install -m 755 /opt/termesh-build/termesh /usr/local/bin/termesh \
          && install -d -m 750 -g termesh /etc/termesh \
          && install -m 640 -g termesh /root/staged/termesh.toml /etc/termesh/ \
          && install -m 644 /root/staged/before/termesh.service /etc/systemd/system/ \
          && systemctl daemon-reload && systemctl enable --now termesh",
    );
    cli.serving(WAIT);
    let mut node = main_pid(&mut m, "0");
    for _ in 0..2 {
        assert_eq!(cgroup_of(&m, &node), "/system.slice/termesh.service");
        m.sh("systemctl restart termesh");
        node = main_pid(&mut m, &node);
        cli.serving(WAIT);
    }
    assert!(
        !m.run(&["test", "-e", &format!("{UNIT}/node")])
            .status
            .success(),
        "no split under the earlier unit"
    );
    // The upgrade's unit (docs/operations.md, "Upgrade"): the next node
    // splits the cgroup.
    m.sh(
        "install -m 644 /root/staged/termesh.service /etc/systemd/system/ \
          && systemctl daemon-reload && systemctl restart termesh",
    );
    cli.serving(WAIT);
    let node = main_pid(&mut m, &node);
    assert_eq!(
        cgroup_of(&m, &node),
        "/system.slice/termesh.service/node",
        "the node moved into `node`"
    );
    let keeper = m.sh("cat /var/lib/termesh/.local/share/termesh/keeper.lock");
    assert_eq!(
        cgroup_of(&m, &keeper),
        "/system.slice/termesh.service/node",
        "the keeper starts there"
    );
    weighed(&mut m);
    let said = m.sh("journalctl -b -o cat _SYSTEMD_UNIT=termesh.service");
    assert!(
        said.contains("run in this CPU cgroup"),
        "the node says where floods go:\n{said}"
    );
    // systemd 254 and later make `node` themselves (DelegateSubgroup=).
    assert_eq!(
        said.contains("moved its cgroup's processes to a subgroup"),
        version < 254,
        "systemd {version}: who made `node`:\n{said}"
    );

    // A program someone types into stays in `node`; a flood nobody
    // types into moves to termesh-bulk.
    let typed = cli.ok(&[
        "new",
        "--",
        "sh",
        "-c",
        "echo $$ > /var/lib/termesh/typed.pid; while read -r l; do echo \"got $l\"; done",
    ]);
    let flood_session = cli.ok(&[
        "new",
        "--",
        "sh",
        "-c",
        "exec yes a flood nobody types into",
    ]);
    let flood = m.until("the flood's pid", |m| {
        let out = m.run(&["pgrep", "-x", "yes"]);
        let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (!pid.is_empty()).then_some(pid)
    });
    typed_until_weighed(&mut m, &cli, &typed, &flood);
    let program = m.sh("cat /var/lib/termesh/typed.pid");
    assert_eq!(
        cgroup_of(&m, &program),
        "/system.slice/termesh.service/node"
    );

    // Each way a node ends starts the next one, which takes the programs up.
    m.sh("systemctl restart termesh");
    let second = next_node(&mut m, &cli, &typed, &node, "restarted");
    m.sh("kill -9 $(systemctl show -p MainPID --value termesh)");
    let third = next_node(&mut m, &cli, &typed, &second, "crashed");
    assert_eq!(m.sh("systemctl show -p NRestarts --value termesh"), "1");
    m.sh("systemctl stop termesh");
    assert!(
        m.alive(&flood) && m.alive(&keeper),
        "a stop ends no program"
    );
    m.sh("systemctl start termesh");
    next_node(&mut m, &cli, &typed, &third, "started");
    // Each node starts with termesh-bulk emptied (it cannot know what an
    // earlier run moved there), and weighs the flood again.
    typed_until_weighed(&mut m, &cli, &typed, &flood);
    let stops = m.sh(
        "journalctl -b -o cat _SYSTEMD_UNIT=termesh.service | grep -c 'cpu given back' || true",
    );
    assert_eq!(stops, "3", "each of the three ends gave the cgroup back");
    cli.ok(&["kill", &flood_session]);
}

/// The node after `before`: it serves session `typed` (its program
/// answers `word`), from `node`, the unit's children weighed.
fn next_node(m: &mut Machine, cli: &Cli, typed: &str, before: &str, word: &str) -> String {
    let pid = main_pid(m, before);
    cli.typed(typed, word, WAIT);
    assert_eq!(cgroup_of(m, &pid), "/system.slice/termesh.service/node");
    weighed(m);
    pid
}

/// Types into `typed` until the flood `flood` is in termesh-bulk: the
/// bulk cgroup is for floods beside someone typing on the node (within
/// 10 s of a key), so keys go on until the node has seen the flood.
fn typed_until_weighed(m: &mut Machine, cli: &Cli, typed: &str, flood: &str) {
    let deadline = Instant::now() + WAIT;
    for key in 0.. {
        cli.typed(typed, &format!("key{key}"), WAIT);
        if cgroup_of(m, flood) == "/system.slice/termesh.service/termesh-bulk" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the flood not in termesh-bulk after {key} keys beside it"
        );
    }
}

/// The unit's cgroup gives `cpu` to its children, and termesh-bulk runs
/// on idle CPU only.
fn weighed(m: &mut Machine) {
    m.until("cpu for the unit's children and termesh-bulk idle", |m| {
        let control = m.sh(&format!("cat {UNIT}/cgroup.subtree_control"));
        let idle = m.run(&["cat", &format!("{UNIT}/termesh-bulk/cpu.idle")]);
        (control.split_whitespace().any(|c| c == "cpu") && idle.stdout == b"1\n").then_some(())
    });
}

/// The v2 cgroup of `pid` in the machine.
fn cgroup_of(m: &Machine, pid: &str) -> String {
    let text = m.sh(&format!("cat /proc/{pid}/cgroup"));
    text.strip_prefix("0::").unwrap_or(&text).to_string()
}

/// The unit's main pid once it is not `before` (0 while none).
fn main_pid(m: &mut Machine, before: &str) -> String {
    m.until("the unit's next main pid", |m| {
        let out = m.run(&["systemctl", "show", "-p", "MainPID", "--value", "termesh"]);
        let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (pid != "0" && pid != before && !pid.is_empty()).then_some(pid)
    })
}
