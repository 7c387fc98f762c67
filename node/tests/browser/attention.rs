//! The console as an attention board, on a phone-sized window: a session
//! that starts to ask comes first, marked, with its question; the page
//! notifies; the question is answered inline (`send`) without opening the
//! terminal, its box keeping the focus while the list redraws; `#/session/ID` (a notification's link) opens a session; the
//! row of keys a phone keyboard lacks reaches the program.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phone_sees_who_waits_answers_inline_and_opens_the_link() {
    let _one = ONE_AT_A_TIME.lock().await;
    let node = TestNode::start();
    let quiet = node.create(&["sh", "-c", "exec sleep 1000"]).await.id;
    let b = Browser::start(390, 844).await;
    log_in(&b, &node.url(), OPERATOR, "operator").await;
    // Asks after the page is up: the page sees it start to wait.
    let asks = node
        .create_with(CreateRequest {
            command: sh("sleep 0.5; printf 'Deploy to prod? [y/n] '; read a; \
                         echo \"answered $a\"; exec sleep 1000"),
            name: Some("deployer".into()),
            ..Default::default()
        })
        .await
        .id;
    b.wait_js(
        "the waiting session first, marked, its question under it",
        &format!(
            "const r = [...document.querySelectorAll('#sessions tbody tr')]; \
             return r.length === 3 && r[0].dataset.session === '{asks}' \
               && r[0].classList.contains('waiting') && r[1].dataset.ask === '{asks}' \
               && r[1].textContent.includes('Deploy to prod? [y/n]') \
               && r[2].dataset.session === '{quiet}'"
        ),
    )
    .await;
    let notified = b.js("return window.termesh.notified").await;
    assert_eq!(notified[0]["session"], asks.as_str(), "{notified}");
    assert_eq!(notified[0]["body"], "Deploy to prod? [y/n]");
    let fits = b
        .js(&format!(
            "const r = document.querySelector(\"tr[data-ask='{asks}']\"); \
             const i = r.querySelector('input').getBoundingClientRect(); \
             const y = [...r.querySelectorAll('button')].find(e => e.textContent === 'y'); \
             return document.documentElement.scrollWidth <= window.innerWidth \
               && i.right <= window.innerWidth && y.getBoundingClientRect().right <= window.innerWidth"
        ))
        .await;
    assert_eq!(fits, serde_json::json!(true), "the answer box fits a phone");
    b.screenshot(&docs_path("console-attention.png")).await;

    // The answer box keeps its focus while the list redraws (here for a
    // session that comes): the keys typed next reach it, and a phone's
    // keyboard stays open.
    let input = b.find(&format!("tr[data-ask='{asks}'] input")).await;
    input.click().await.unwrap();
    let other = node.create(&["sh", "-c", "exec sleep 1000"]).await.id;
    b.wait_js(
        "the list redrawn with the new session, the answer box still focused",
        &format!(
            "return !!document.querySelector(\"tr[data-session='{other}']\") \
               && document.activeElement === \
                    document.querySelector(\"tr[data-ask='{asks}'] input\")"
        ),
    )
    .await;

    // Answered inline: typed and sent, the terminal never opened.
    input.send_keys("y").await.unwrap();
    b.find(&format!("tr[data-ask='{asks}'] button"))
        .await
        .click()
        .await
        .unwrap();
    // Whatever was answered, then what: a failure says which.
    let text = wait_output(&node, &asks, "answered").await;
    assert!(
        text.contains("answered y"),
        "the answer typed was not `y`: {text:?}"
    );
    b.wait_js(
        "the question gone once answered",
        &format!(
            "return !document.querySelector(\"tr[data-ask='{asks}']\") \
               && window.termesh.sessions.get('{asks}').state !== 'waiting'"
        ),
    )
    .await;
    assert!(
        b.js("return window.termesh.terms.size").await == serde_json::json!(0),
        "no terminal was opened to answer"
    );

    // The notification's link opens the session (the token is kept for
    // the tab); the phone's key row reaches the program.
    let keys = node
        .create(&["sh", "-c", "stty -echo -icanon -isig; exec od -An -c"])
        .await
        .id;
    b.goto(&format!("{}/#/session/{keys}", node.url())).await;
    b.wait_js(
        "the linked session open",
        &format!("const t = window.termesh.terms.get('{keys}'); return t && t.lastSeq !== null"),
    )
    .await;
    assert!(
        b.displayed(".pane.active .keys").await,
        "a phone gets the key row"
    );
    for key in ["Esc", "Tab", "\u{2191}", "^C"] {
        b.find(&format!(".pane.active .keys button[data-key='{key}']"))
            .await
            .click()
            .await
            .unwrap();
    }
    b.find(".pane.active .keys button[data-key='Ctrl']")
        .await
        .click()
        .await
        .unwrap();
    b.type_into_terminal("d").await;
    // od prints the bytes once it has 16: ESC, TAB, ESC [ A, the ^C key's
    // ETX (the terminal signals nothing here, so it arrives as the byte
    // a terminal turns into SIGINT), then Ctrl and d (not canonical: 004
    // is a byte too).
    b.type_into_terminal("012345678").await;
    wait_output(&node, &keys, "033  \\t 033   [   A 003 004").await;
}
