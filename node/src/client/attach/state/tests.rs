//! The attach's state driven without a terminal or a node: messages,
//! keys, sizes and silence in; what it sends and how it ends out.

use termesh_transport::{ClientMsg, EventKind, ServerMsg, SessionInfo, SessionStatus};

use super::*;

const ID: &str = "s1";
const PREFIX: u8 = 0x1d;

fn opts(read_only: bool) -> AttachOptions {
    AttachOptions {
        session: ID.into(),
        label: ID.into(),
        prefix: PREFIX,
        scrollback: 0,
        read_only,
        raw: false,
        title: ID.into(),
        take: false,
        predict: false,
        mouse: false,
        at: None,
    }
}

fn subscribed() -> ServerMsg {
    ServerMsg::Subscribed {
        id: SUBSCRIBE_ID,
        session: ID.into(),
        last_seq: 0,
        oldest_seq: 0,
        cols: 80,
        rows: 24,
    }
}

fn snapshot(id: Option<u64>, seq: u64, cols: u16, rows: u16, text: &str) -> ServerMsg {
    ServerMsg::Snapshot {
        id,
        session: ID.into(),
        seq,
        cols,
        rows,
        data: text.as_bytes().to_vec(),
    }
}

fn output(seq: u64, data: &[u8]) -> ServerMsg {
    ServerMsg::Output {
        session: ID.into(),
        seq,
        data: data.to_vec(),
    }
}

fn event(event: EventKind) -> ServerMsg {
    ServerMsg::Event {
        session: ID.into(),
        event,
    }
}

/// A state that subscribed and was shown a snapshot at `seq`; its outbox
/// emptied.
fn attached(term: Option<(u16, u16)>, read_only: bool) -> State {
    let mut st = State::new(opts(read_only), term);
    st.subscribe();
    st.on_message(subscribed()).unwrap();
    st.on_message(snapshot(None, 10, 80, 24, "hello")).unwrap();
    st.take_outbox();
    st
}

fn ended(step: Step) -> Option<Ended> {
    match step {
        Step::End(end) => Some(end),
        Step::Continue => None,
    }
}

#[test]
fn a_first_attach_subscribes_asks_the_status_and_takes_the_size_once() {
    let mut st = State::new(opts(false), Some((100, 30)));
    st.subscribe();
    let sent = st.take_outbox();
    assert!(matches!(
        sent[..],
        [ClientMsg::Subscribe {
            from_seq: None,
            scrollback: Some(0),
            ..
        }]
    ));
    st.on_message(subscribed()).unwrap();
    assert!(matches!(
        st.take_outbox()[..],
        [ClientMsg::List { id: LIST_ID, .. }]
    ));
    st.on_message(snapshot(None, 10, 80, 24, "hello")).unwrap();
    assert!(st.shown());
    assert!(matches!(
        st.take_outbox()[..],
        [ClientMsg::Resize {
            cols: 100,
            rows: 30,
            ..
        }]
    ));
    // A later snapshot (a resync) leaves the size alone.
    st.on_message(snapshot(None, 12, 80, 24, "hello")).unwrap();
    assert!(st.take_outbox().is_empty());
}

#[test]
fn without_a_terminal_or_read_only_the_size_is_never_sent() {
    for (term, read_only) in [(None, false), (Some((100, 30)), true)] {
        let mut st = attached(term, read_only);
        st.on_outside(Outside::WindowChanged(term.map(|(c, r)| (c + 1, r))), true);
        st.on_outside(Outside::Keys(vec![PREFIX, b's']), true);
        assert!(
            !st.take_outbox()
                .iter()
                .any(|m| matches!(m, ClientMsg::Resize { .. })),
            "{term:?} read-only {read_only}"
        );
    }
}

#[test]
fn keys_typed_offline_are_sent_after_the_resume_which_continues_after_the_last_seq() {
    let mut st = attached(Some((80, 24)), false);
    st.on_message(output(11, b"a")).unwrap();
    st.on_message(output(12, b"b")).unwrap();
    st.link_lost(&anyhow::anyhow!("reset"));
    assert_eq!(st.on_outside(Outside::Keys(b"ls\r".to_vec()), false), None);
    st.flush_input();
    assert!(st.take_outbox().is_empty(), "nothing sent offline");
    st.subscribe();
    st.flush_input();
    st.on_message(subscribed()).unwrap();
    st.flush_input();
    let sent = st.take_outbox();
    assert!(
        matches!(
            sent[0],
            ClientMsg::Subscribe {
                from_seq: Some(12),
                ..
            }
        ),
        "{sent:?}"
    );
    let typed: Vec<u8> = sent
        .iter()
        .filter_map(|m| match m {
            ClientMsg::Input { data, .. } => Some(data.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(typed, b"ls\r");
}

#[test]
fn read_only_keys_are_not_sent_and_the_prefix_d_detaches() {
    let mut st = attached(Some((80, 24)), true);
    assert_eq!(
        st.on_outside(Outside::Keys(b"rm -rf /\r".to_vec()), true),
        None
    );
    st.flush_input();
    assert!(st.take_outbox().is_empty());
    assert_eq!(
        st.on_outside(Outside::Keys(vec![PREFIX, b'd']), true),
        Some(Ended::Detached)
    );
}

#[test]
fn output_is_acked_every_quarter_window_and_exit_ends_the_attach() {
    let mut st = attached(Some((80, 24)), false);
    let chunk = vec![b'x'; (WINDOW / 8) as usize];
    let mut acks = Vec::new();
    for seq in 11..19 {
        st.on_message(output(seq, &chunk)).unwrap();
        acks.extend(st.take_outbox().into_iter().filter_map(|m| match m {
            ClientMsg::Ack { seq, .. } => Some(seq),
            _ => None,
        }));
    }
    assert_eq!(acks, [12, 14, 16, 18]);
    let end = st
        .on_message(event(EventKind::Exited {
            exit_code: 3,
            signal: None,
        }))
        .unwrap();
    assert_eq!(
        ended(end),
        Some(Ended::Exited {
            code: 3,
            signal: None
        })
    );
}

#[test]
fn a_resize_asks_for_the_nodes_screen_and_takes_it_in_place() {
    let mut st = attached(Some((80, 24)), false);
    st.on_message(event(EventKind::Resized { cols: 60, rows: 20 }))
        .unwrap();
    let sent = st.take_outbox();
    let [ClientMsg::Screen { id, .. }] = sent[..] else {
        panic!("{sent:?}")
    };
    assert!(st.resync.is_some());
    st.on_message(snapshot(Some(id), 10, 60, 20, "after"))
        .unwrap();
    assert!(st.resync.is_none(), "the node's screen was taken");
}

#[test]
fn the_scroll_key_asks_for_history_and_the_page_opens_the_scroll_mode() {
    let mut st = attached(Some((80, 24)), false);
    // Offline the scroll mode cannot load: said, nothing asked.
    st.on_outside(Outside::Keys(vec![PREFIX, b'[']), false);
    assert!(st.take_outbox().is_empty() && st.scroll_wanted.is_none());
    st.on_outside(Outside::Keys(vec![PREFIX, b'[']), true);
    let sent = st.take_outbox();
    assert!(
        matches!(sent[..], [ClientMsg::History { id: HISTORY_ID, .. }]),
        "{sent:?}"
    );
    st.on_message(ServerMsg::History {
        id: HISTORY_ID,
        session: ID.into(),
        seq: 10,
        lines: Some(vec!["one".into(), "two".into()]),
        data: None,
        first_seq: None,
        more: Some(false),
    })
    .unwrap();
    assert!(st.view.scrolling());
}

#[test]
fn a_session_found_lost_ends_once_shown_and_a_takeover_ends_it_too() {
    let mut st = attached(Some((80, 24)), false);
    let info = SessionInfo {
        id: ID.into(),
        name: None,
        node: "n".into(),
        command: vec!["sh".into()],
        cwd: None,
        status: SessionStatus::Lost,
        exit_code: None,
        phase: None,
        created_at: 0,
        cols: 80,
        rows: 24,
        last_seq: 10,
        viewers: 1,
        idle_ms: 0,
        at_prompt: false,
        tags: Vec::new(),
        state: None,
        state_since: None,
        waiting_for: None,
    };
    let step = st
        .on_message(ServerMsg::Sessions {
            id: LIST_ID,
            sessions: vec![info],
            next: None,
        })
        .unwrap();
    assert_eq!(ended(step), Some(Ended::Lost));
    let mut st = attached(Some((80, 24)), false);
    let step = st
        .on_message(event(EventKind::Detached {
            keep: "another".into(),
        }))
        .unwrap();
    assert_eq!(ended(step), Some(Ended::TakenOver));
}

#[test]
fn a_silent_link_is_probed_then_given_up() {
    let mut st = attached(Some((80, 24)), false);
    st.tick_period(Duration::from_secs(3));
    // The last probe went long ago.
    st.last_ping = Instant::now() - Duration::from_secs(60);
    st.on_tick(Duration::from_millis(100));
    assert!(st.take_outbox().is_empty(), "not quiet yet");
    st.on_tick(Duration::from_millis(1500));
    assert!(matches!(
        st.take_outbox()[..],
        [ClientMsg::Ping { nonce: None }]
    ));
    assert!(!st.stale(Duration::from_secs(5)));
    assert!(st.stale(Duration::from_secs(6)));
}

#[test]
fn at_opens_the_scroll_mode_on_the_page_ending_at_that_seq() {
    let mut st = State::new(
        AttachOptions {
            at: Some(41),
            ..opts(false)
        },
        Some((80, 24)),
    );
    st.on_message(subscribed()).unwrap();
    st.take_outbox();
    st.on_message(snapshot(None, 100, 80, 24, "hello")).unwrap();
    let asked: Vec<ClientMsg> = st.take_outbox();
    assert!(
        asked.iter().any(|m| matches!(
            m,
            ClientMsg::History {
                before_seq: Some(42),
                rows: Some(_),
                ..
            }
        )),
        "{asked:?}"
    );
    // Once: a resync's snapshot does not open it again.
    st.on_message(snapshot(None, 120, 80, 24, "hello")).unwrap();
    assert!(!st
        .take_outbox()
        .iter()
        .any(|m| matches!(m, ClientMsg::History { .. })));
}

#[test]
fn typing_after_another_viewer_sized_the_session_takes_the_size_back() {
    let mut st = attached(Some((80, 24)), false);
    // Same size: typing sends keys only.
    st.on_outside(Outside::Keys(b"a".to_vec()), true);
    assert!(!st
        .take_outbox()
        .iter()
        .any(|m| matches!(m, ClientMsg::Resize { .. })));
    // A phone took it; the next key here takes it back, before the key.
    st.on_message(event(EventKind::Resized { cols: 40, rows: 20 }))
        .unwrap();
    st.take_outbox();
    st.on_outside(Outside::Keys(b"b".to_vec()), true);
    st.flush_input();
    let sent = st.take_outbox();
    assert!(
        matches!(
            sent[..],
            [
                ClientMsg::Resize {
                    cols: 80,
                    rows: 24,
                    ..
                },
                ClientMsg::Input { .. }
            ]
        ),
        "{sent:?}"
    );
    // Read-only keys never size it.
    let mut ro = attached(Some((80, 24)), true);
    ro.on_message(event(EventKind::Resized { cols: 40, rows: 20 }))
        .unwrap();
    ro.take_outbox();
    ro.on_outside(Outside::Keys(b"b".to_vec()), true);
    assert!(!ro
        .take_outbox()
        .iter()
        .any(|m| matches!(m, ClientMsg::Resize { .. })));
}

/// The node's answer to a viewer token's resize or input.
fn forbidden() -> ServerMsg {
    ServerMsg::Error {
        id: None,
        session: Some(ID.into()),
        code: termesh_transport::ErrorCode::Forbidden,
        message: "a viewer may not resize".into(),
    }
}

fn notice(st: &State) -> Option<&str> {
    st.notice.as_ref().map(|(text, _)| text.as_str())
}

#[test]
fn a_viewer_tokens_refusal_of_a_same_size_claim_is_said_at_the_first_key() {
    // The attach said the size the session has (to count as a sizer):
    // its refusal changes nothing on screen, so nothing is said yet.
    let mut st = attached(Some((80, 24)), false);
    st.on_message(forbidden()).unwrap();
    assert_eq!(notice(&st), None);
    st.on_outside(Outside::Keys(b"a".to_vec()), true);
    st.flush_input();
    assert!(
        notice(&st).is_some_and(|n| n.contains("read-only")),
        "{:?}",
        notice(&st)
    );
    assert!(!st
        .take_outbox()
        .iter()
        .any(|m| matches!(m, ClientMsg::Input { .. })));
    // A claim of another size refused: said at once.
    let mut other = attached(Some((100, 30)), false);
    other.on_message(forbidden()).unwrap();
    assert!(
        notice(&other).is_some_and(|n| n.contains("read-only")),
        "{:?}",
        notice(&other)
    );
}
