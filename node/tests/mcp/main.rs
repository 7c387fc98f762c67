//! `termesh mcp` driven by a real MCP client (the Python `mcp` package,
//! installed by deploy/test.sh in a venv beside the build): the client
//! starts `termesh mcp`, lists the tools, creates a session running a
//! scripted agent, waits for it to ask, answers and reads the result
//! (`client.py` says each check).

#[path = "../common/mod.rs"]
mod common;

use std::path::PathBuf;

use common::*;

/// The venv deploy/test.sh makes (`<target>/py-mcp`), or
/// `TERMESH_TEST_PYTHON`.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("TERMESH_TEST_PYTHON") {
        return p.into();
    }
    // target/debug/deps/mcp-... -> target/py-mcp
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap();
    target.join("py-mcp/bin/python")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_mcp_client_runs_an_agent_through_termesh_mcp() {
    let node = TestNode::start();
    let python = python();
    assert!(
        python.exists(),
        "no Python with the `mcp` package at {}: run `bash deploy/test.sh` (it makes the venv) or set TERMESH_TEST_PYTHON",
        python.display()
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
    let (url, python) = (node.url(), python.clone());
    let out = within(
        PATIENCE * 2,
        "the MCP client",
        tokio::task::spawn_blocking(move || {
            std::process::Command::new("timeout")
                .args(["-s", "KILL", "110"])
                .arg(python)
                .arg(script)
                .args([env!("CARGO_BIN_EXE_termesh"), &url, OPERATOR])
                .output()
                .unwrap()
        }),
    )
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("every check passed"),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
