//! A spawn that fails for the node's own reasons (no file descriptors
//! left) answers `internal`, not `bad_request`. Its own test binary: it
//! lowers the process's descriptor limit.

mod common;

use common::*;
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use termesh_transport::{ClientMsg, CreateRequest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_descriptors_left_is_the_nodes_fault() {
    let node = TestNode::start();
    let mut c = node.client(OPERATOR).await;
    let create = |id| ClientMsg::Create {
        id,
        req: CreateRequest {
            command: Some(vec!["true".into()]),
            ..Default::default()
        },
    };
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    setrlimit(Resource::RLIMIT_NOFILE, open, hard).unwrap();
    let refused = c.request(create).await;
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    let err = refused.unwrap_err().to_string();
    assert!(err.starts_with("internal"), "{err}");
    c.request(create).await.unwrap();
    // And a missing program is still the request's fault.
    let err = c
        .request(|id| ClientMsg::Create {
            id,
            req: CreateRequest {
                command: Some(vec!["/no/such/program".into()]),
                ..Default::default()
            },
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("bad_request"), "{err}");
}
