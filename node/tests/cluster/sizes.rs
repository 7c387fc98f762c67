//! The size policy across nodes: a viewer on another node that sized a
//! session gives the size back when it leaves, as one on the owner does
//! (its node's mirror stands for it at the owner: `claim_size`).

use super::*;

async fn subscribed(cluster: &Cluster, i: usize, session: &str) -> Client {
    let mut c = Client::connect(&cluster.target(i)).await.unwrap();
    within(PATIENCE, "a subscription", async {
        loop {
            let reply = c
                .request(|id| ClientMsg::Subscribe {
                    id,
                    session: session.into(),
                    from_seq: None,
                    window: Some(1 << 20),
                    scrollback: None,
                })
                .await
                .unwrap();
            if matches!(reply, ServerMsg::Subscribed { .. }) {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    c
}

fn resize(session: &str, cols: u64, rows: u64) -> ClientMsg {
    ClientMsg::Resize {
        session: session.into(),
        cols,
        rows,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_on_another_node_gives_the_size_back_when_it_leaves() {
    let cluster = Cluster::start(&["a", "b"]);
    let s = create(&cluster, 0, "sized").await;
    session_on(&cluster, 1, &s.id, |_| true).await;
    // The desk on the owner, the phone on b (through b's mirror).
    let mut desk = subscribed(&cluster, 0, &s.id).await;
    desk.send(&resize(&s.id, 120, 40)).await.unwrap();
    session_on(&cluster, 0, &s.id, |i| (i.cols, i.rows) == (120, 40)).await;
    let mut phone = subscribed(&cluster, 1, &s.id).await;
    phone.send(&resize(&s.id, 40, 20)).await.unwrap();
    session_on(&cluster, 0, &s.id, |i| (i.cols, i.rows) == (40, 20)).await;
    // A watcher on b leaving changes nothing.
    let watcher = subscribed(&cluster, 1, &s.id).await;
    watcher.close().await;
    // The phone leaves: the desk's size again.
    phone.close().await;
    session_on(&cluster, 0, &s.id, |i| (i.cols, i.rows) == (120, 40)).await;

    // The other way: the phone holds the size while the desk leaves;
    // nothing changes; then the phone's second tab (b) holds it, the
    // first leaves and the second's size comes back.
    let mut tab1 = subscribed(&cluster, 1, &s.id).await;
    let mut tab2 = subscribed(&cluster, 1, &s.id).await;
    tab2.send(&resize(&s.id, 90, 30)).await.unwrap();
    session_on(&cluster, 0, &s.id, |i| (i.cols, i.rows) == (90, 30)).await;
    tab1.send(&resize(&s.id, 50, 25)).await.unwrap();
    session_on(&cluster, 0, &s.id, |i| (i.cols, i.rows) == (50, 25)).await;
    desk.close().await;
    tab1.close().await;
    session_on(&cluster, 0, &s.id, |i| (i.cols, i.rows) == (90, 30)).await;
    tab2.close().await;
}
