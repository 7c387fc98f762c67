//! A notification's body in each `[[notify]]` format: the protocol's JSON,
//! an ntfy message (text body, title and click link in headers), a
//! Slack-compatible `{"text": ...}`.

use termesh_config::notify::NotifyFormat;

use super::Change;

/// Content type, body and extra headers.
pub fn body(
    format: NotifyFormat,
    c: &Change,
) -> (&'static str, String, Vec<(&'static str, String)>) {
    match format {
        NotifyFormat::Json => (
            "application/json",
            serde_json::to_string(c).unwrap_or_default(),
            Vec::new(),
        ),
        NotifyFormat::Ntfy => {
            let headers = vec![
                ("Title", header_safe(&title(c))),
                ("Click", header_safe(&c.url)),
                ("Tags", "computer".to_string()),
            ];
            ("text/plain; charset=utf-8", text(c), headers)
        }
        NotifyFormat::Slack => {
            let text = format!(
                "*{}*\n{}\n<{}|open in the console>",
                title(c),
                text(c),
                c.url
            );
            (
                "application/json",
                serde_json::json!({ "text": text }).to_string(),
                Vec::new(),
            )
        }
    }
}

/// `build (1a2b…) on node-1 is waiting`.
fn title(c: &Change) -> String {
    let who = match &c.name {
        Some(name) => format!("{name} ({})", &c.session),
        None => c.session.clone(),
    };
    let what = match c.state.as_str() {
        "failed" => "failed",
        "waiting" => "is waiting for you",
        "working" => "is working",
        _ => "is idle",
    };
    format!("{who} on {} {what}", c.node)
}

/// The question, or the state.
fn text(c: &Change) -> String {
    c.waiting_for.clone().unwrap_or_else(|| title(c))
}

/// A header value on one line of printable text (a question may hold
/// anything its program printed).
fn header_safe(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || !c.is_ascii() {
                ' '
            } else {
                c
            }
        })
        .take(512)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change() -> Change {
        Change {
            session: "1a2b3c4d5e6f".into(),
            name: Some("build".into()),
            node: "n1".into(),
            state: "waiting".into(),
            waiting_for: Some("Do you want to proceed? ❯".into()),
            seq: 42,
            url: "http://n1:7420/#/session/1a2b3c4d5e6f".into(),
        }
    }

    #[test]
    fn each_format_carries_the_question_and_the_link() {
        let (ct, body, headers) = body(NotifyFormat::Json, &change());
        assert_eq!(ct, "application/json");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        for key in [
            "session",
            "name",
            "node",
            "state",
            "waiting_for",
            "seq",
            "url",
        ] {
            assert!(v.get(key).is_some(), "{key} in {body}");
        }
        assert!(headers.is_empty());
        let (_, text, headers) = super::body(NotifyFormat::Ntfy, &change());
        assert_eq!(text, "Do you want to proceed? ❯");
        let title = &headers.iter().find(|(h, _)| *h == "Title").unwrap().1;
        assert_eq!(title, "build (1a2b3c4d5e6f) on n1 is waiting for you");
        assert!(headers
            .iter()
            .any(|(h, v)| *h == "Click" && v.ends_with("#/session/1a2b3c4d5e6f")));
        let (_, slack, _) = super::body(NotifyFormat::Slack, &change());
        let v: serde_json::Value = serde_json::from_str(&slack).unwrap();
        assert!(v["text"]
            .as_str()
            .unwrap()
            .contains("Do you want to proceed?"));
    }
}
