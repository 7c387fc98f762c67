//! An agent's state is decided on its owner and seen from every node; a
//! `send` through another node answers it, and one held until the session
//! waits is written there too.

use super::*;
use termesh_transport::{AgentState, SendWhen};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_state_is_seen_and_answered_from_any_node() {
    let cluster = Cluster::start(&["a", "b"]);
    let script = "printf 'Ship it? [y/n] '; read x; echo \"got $x\"; sleep 1; \
                  printf 'Again? [y/n] '; read y; echo \"then $y\"; exec sleep 1000";
    let req = CreateRequest {
        command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        node: Some("a".into()),
        ..Default::default()
    };
    let created = within(PATIENCE, "create on a from b", async {
        loop {
            let made = ask(&cluster, 1, |id| ClientMsg::Create {
                id,
                req: req.clone(),
            })
            .await;
            if let Ok(ServerMsg::Created { session, .. }) = made {
                return session;
            }
            poll_pause().await;
        }
    })
    .await;
    let id = created.id;
    session_on(&cluster, 1, &id, |s| {
        s.state == Some(AgentState::Waiting) && s.waiting_for.as_deref() == Some("Ship it? [y/n]")
    })
    .await;
    // Answered through b; the next question's answer is sent through b
    // before it is asked, held on a until the session waits again.
    ask(&cluster, 1, |rid| ClientMsg::Send {
        id: rid,
        session: id.clone(),
        text: "y".into(),
        submit: None,
        when: None,
    })
    .await
    .unwrap();
    session_on(&cluster, 1, &id, |s| s.state == Some(AgentState::Working)).await;
    ask(&cluster, 1, |rid| ClientMsg::Send {
        id: rid,
        session: id.clone(),
        text: "n".into(),
        submit: None,
        when: Some(SendWhen::Waiting),
    })
    .await
    .unwrap();
    session_on(&cluster, 0, &id, |s| s.state == Some(AgentState::Idle)).await;
    let history = ask(&cluster, 1, |rid| ClientMsg::History {
        id: rid,
        session: id.clone(),
        limit: Some(4096),
        before_seq: None,
        rows: None,
    })
    .await
    .unwrap();
    let ServerMsg::History {
        data: Some(data), ..
    } = history
    else {
        panic!("{history:?}")
    };
    let text = String::from_utf8_lossy(&data);
    assert!(text.contains("got y") && text.contains("then n"), "{text}");
}
